// Package hold keeps a cudaprobe's memory allocated in a container until it is stopped or killed,
// started through any launch method (plugin/launch): the test bed's way to hold memory while a
// monitor or a neighbour is judged.
package hold

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/launch"
)

// Spec is a cudaprobe that keeps its memory until it is stopped (or killed).
type Spec struct {
	Name      string   // names its files in the container (/tmp/limitbed-hold-<name>.*)
	Cudaprobe string   // its path in the container
	MiB       int      // what it allocates
	API       string   // cudaprobe --api ("" = symbols)
	Env       []string // K=V set in its own environment (no quote, no newline)
	Args      []string // more cudaprobe flags (no quote, no newline, no space)
}

// Holder is a running Spec.
type Holder struct {
	Name  string
	c     sandbox.Container
	files string
	done  chan error
	// Report is cudaprobe's JSON line.
	Report json.RawMessage
}

// Start starts spec through m in c and returns once cudaprobe reported its allocation (granted or
// not: the report says), or fails when it ended first or ctx ended. The holder's shell records
// when the allocation was reported (GrantedAt) and cudaprobe's exit status (Ended).
func Start(ctx context.Context, c sandbox.Container, m launch.Method, spec Spec) (*Holder, error) {
	if spec.API == "" {
		spec.API = "symbols"
	}
	env := ""
	for _, kv := range spec.Env {
		if !strings.Contains(kv, "=") || strings.ContainsAny(kv, "'\n") {
			return nil, fmt.Errorf("hold %s: %q is not K=V without a quote or a newline", spec.Name, kv)
		}
		env += "'" + kv + "' "
	}
	for _, a := range spec.Args {
		if !strings.HasPrefix(a, "--") || strings.ContainsAny(a, "'\n \t;&|$`\"\\") {
			return nil, fmt.Errorf("hold %s: %q is not a cudaprobe flag without a quote, a space or a shell character", spec.Name, a)
		}
	}
	h := &Holder{Name: spec.Name, c: c, files: "/tmp/limitbed-hold-" + spec.Name, done: make(chan error, 1)}
	f := h.files
	args := strings.Join(append([]string{"--hold-until-signal"}, spec.Args...), " ")
	cmd := fmt.Sprintf(`rm -f %[1]s.*; env %[2]s %[3]s --mib %[4]d --api=%[5]s %[6]s > %[1]s.out 2> %[1]s.err & echo $! > %[1]s.pid
while ! grep -q '^{' %[1]s.out 2>/dev/null && kill -0 $! 2>/dev/null; do sleep 0.02; done; date +%%s.%%N > %[1]s.at
wait $!; rc=$?; date +%%s.%%N > %[1]s.end; echo $rc > %[1]s.rc`, f, env, spec.Cudaprobe, spec.MiB, spec.API, args)
	go func() {
		_, err := launch.Run(context.Background(), c, m, cmd)
		h.done <- err
	}()
	for {
		res, err := c.Exec(ctx, []string{"sh", "-c", "test -s " + f + ".at && grep '^{' " + f + ".out"}, sandbox.ExecOptions{})
		if err != nil {
			return nil, fmt.Errorf("hold %s: %w", spec.Name, err)
		}
		if line := bytes.TrimSpace(res.Stdout); len(line) > 0 {
			h.Report = json.RawMessage(line)
			return h, nil
		}
		select {
		case err := <-h.done:
			stderr, _ := h.read(context.WithoutCancel(ctx), ".err")
			return nil, fmt.Errorf("hold %s: ended before reporting: %v\n%s", spec.Name, err, stderr)
		case <-ctx.Done():
			return nil, fmt.Errorf("hold %s: no report: %w", spec.Name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// read returns a holder file's content ("" when absent).
func (h *Holder) read(ctx context.Context, suffix string) (string, error) {
	res, err := h.c.Exec(ctx, []string{"sh", "-c", "cat " + h.files + suffix + " 2>/dev/null"}, sandbox.ExecOptions{})
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(res.Stdout)), nil
}

// GrantedAt is when cudaprobe reported its allocation, by the container's clock (the node's).
func (h *Holder) GrantedAt(ctx context.Context) (time.Time, error) { return h.stamp(ctx, ".at") }

// EndedAt is when cudaprobe ended (after Ended returned), by the same clock.
func (h *Holder) EndedAt(ctx context.Context) (time.Time, error) { return h.stamp(ctx, ".end") }

func (h *Holder) stamp(ctx context.Context, suffix string) (time.Time, error) {
	s, err := h.read(ctx, suffix)
	if err != nil {
		return time.Time{}, err
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("holder %s: time %q in %s%s: %w", h.Name, s, h.files, suffix, err)
	}
	return time.Unix(0, int64(f*1e9)), nil
}

// Running reports whether cudaprobe still runs.
func (h *Holder) Running(ctx context.Context) (bool, error) {
	res, err := h.c.Exec(ctx, []string{"sh", "-c", "kill -0 $(cat " + h.files + ".pid)"}, sandbox.ExecOptions{})
	if err != nil {
		return false, err
	}
	return res.ExitCode == 0, nil
}

// ErrStillRunning is returned by Ended when ctx ends first.
var ErrStillRunning = errors.New("still running")

// Ended waits for cudaprobe to end and returns its exit status as its shell saw it ("137":
// SIGKILL).
func (h *Holder) Ended(ctx context.Context) (string, error) {
	for {
		rc, err := h.read(ctx, ".rc")
		if err != nil {
			return "", err
		}
		if rc != "" {
			return rc, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("holder %s: %w", h.Name, ErrStillRunning)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop ends cudaprobe (SIGTERM) and waits up to 30 s for its launch to return.
func (h *Holder) Stop(ctx context.Context) {
	_, _ = h.c.Exec(ctx, []string{"sh", "-c", `kill "$(cat ` + h.files + `.pid)" 2>/dev/null`}, sandbox.ExecOptions{})
	select {
	case <-h.done:
	case <-time.After(30 * time.Second):
	}
}
