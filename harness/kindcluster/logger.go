package kindcluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	kindlog "sigs.k8s.io/kind/pkg/log"
)

// kindLogger adapts an slog.Logger to kind's logger: V(0) is Info, higher levels are Debug.
type kindLogger struct{ l *slog.Logger }

var _ kindlog.Logger = kindLogger{}

func (k kindLogger) Warn(msg string)                          { k.l.Warn(msg) }
func (k kindLogger) Warnf(format string, args ...any)         { k.l.Warn(fmt.Sprintf(format, args...)) }
func (k kindLogger) Error(msg string)                         { k.l.Error(msg) }
func (k kindLogger) Errorf(format string, args ...any)        { k.l.Error(fmt.Sprintf(format, args...)) }
func (k kindLogger) V(level kindlog.Level) kindlog.InfoLogger { return kindInfo{k.l, level} }

type kindInfo struct {
	l     *slog.Logger
	level kindlog.Level
}

func (i kindInfo) lvl() slog.Level {
	if i.level > 0 {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// kind's logger API carries no context.
func (i kindInfo) Info(msg string) { i.l.Log(context.Background(), i.lvl(), strings.TrimSpace(msg)) }
func (i kindInfo) Infof(format string, args ...any) {
	i.l.Log(context.Background(), i.lvl(), strings.TrimSpace(fmt.Sprintf(format, args...)))
}
func (i kindInfo) Enabled() bool { return i.level == 0 }
