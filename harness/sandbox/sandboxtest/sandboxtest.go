// Package sandboxtest gives tests sandbox backends and containers, skipping with a clear message
// where a backend cannot run here, except under CI=true, where CI provides every backend and a
// missing one is a failure.
package sandboxtest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/harness/sandbox/docker"
	"github.com/limitbed/limitbed/internal/tier"
)

// Logger returns a logger that writes to the test log (debug level with LIMITBED_DEBUG=1).
func Logger(tb testing.TB) *slog.Logger {
	level := slog.LevelInfo
	if os.Getenv("LIMITBED_DEBUG") == "1" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: level}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Helper()
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Docker returns the docker backend, with the workload image built.
func Docker(tb testing.TB) sandbox.Backend {
	tb.Helper()
	b := docker.New(Logger(tb))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Available(ctx); err != nil {
		tier.Unavailable(tb, tier.Docker, err.Error())
	}
	ctx, cancel = context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := sandbox.EnsureWorkloadImage(ctx); err != nil {
		tb.Fatal(err)
	}
	return b
}

// Host returns the host backend.
func Host(tb testing.TB) sandbox.Backend {
	tb.Helper()
	b := sandbox.NewHost(Logger(tb), "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Available(ctx); err != nil {
		tier.Unavailable(tb, tier.HostBackend, err.Error())
	}
	return b
}

var seq atomic.Int64

// Name returns a container name unique to this test process.
func Name(tb testing.TB) string {
	tb.Helper()
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			return r
		}
		return '-'
	}, strings.ToLower(tb.Name()))
	if len(clean) > 40 {
		clean = clean[:40]
	}
	return fmt.Sprintf("limitbed-%s-%d-%d", clean, os.Getpid(), seq.Add(1))
}

// Start starts spec on b and stops the container when the test ends. An empty spec.Name gets a
// unique one; an empty spec.Image the workload image.
func Start(tb testing.TB, b sandbox.Backend, spec sandbox.ContainerSpec) sandbox.Container {
	tb.Helper()
	if spec.Name == "" {
		spec.Name = Name(tb)
	}
	if spec.Image == "" {
		spec.Image = sandbox.WorkloadImage
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := b.Start(ctx, spec)
	if err != nil {
		tb.Fatalf("start %s container: %v", b.Name(), err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			tb.Errorf("stop %s container: %v", b.Name(), err)
		}
	})
	return c
}

// WriteFile writes content to path (mode 0644) or fails the test: a host file a container mounts.
func WriteFile(tb testing.TB, path, content string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
}
