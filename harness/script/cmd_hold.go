package script

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/limitbed/limitbed/harness/launch"
	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/harness/sandbox"
)

// holder is a process keeping memory allocated in a container until released (or killed).
type holder struct {
	name      string
	container string
	c         sandbox.Container
	files     string // in the container: <files>.out, .pid, .at (when granted), .rc (its exit status)
	done      chan error
}

func (h *holder) stop(ctx context.Context) {
	_, _ = h.c.Exec(ctx, []string{"sh", "-c", `kill "$(cat ` + h.files + `.pid)" 2>/dev/null`}, sandbox.ExecOptions{})
	select {
	case <-h.done:
	case <-time.After(30 * time.Second):
	}
}

// state reads a holder file in the container ("" when absent).
func (h *holder) read(ctx context.Context, suffix string) (string, error) {
	res, err := h.c.Exec(ctx, []string{"sh", "-c", "cat " + h.files + suffix + " 2>/dev/null"}, sandbox.ExecOptions{})
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(res.Stdout)), nil
}

// grantedAt is when the holder's allocation was granted, by the container's clock (the host's).
func (h *holder) grantedAt(ctx context.Context) (time.Time, error) {
	s, err := h.read(ctx, ".at")
	if err != nil {
		return time.Time{}, err
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("holder %s: grant time %q: %w", h.name, s, err)
	}
	return time.Unix(0, int64(f*1e9)), nil
}

const holdUsage = "hold METHOD CONTAINER MIB [--as=NAME] [--api=symbols|dlsym|procaddress|dlvsym|dlmopen] [--env=K=V]..."

// cmdHold starts `cudaprobe --mib MIB --hold-until-signal` through METHOD in CONTAINER and returns
// once it reported its allocation granted; release ends it. A holder is named by --as (default:
// the container's name); a container may have several. --api picks how cudaprobe reaches the
// driver (the bypasses of docs/attacks.md among them); each --env is set in its own environment.
func cmdHold(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: %s", holdUsage)
	}
	st := getState(ts)
	m, err := launch.Lookup(args[0])
	if err != nil {
		ts.Fatalf("%v\nusage: %s", err, holdUsage)
	}
	if _, err := strconv.Atoi(args[2]); err != nil {
		ts.Fatalf("MIB %q: %v\nusage: %s", args[2], err, holdUsage)
	}
	fs := flag.NewFlagSet("hold", flag.ContinueOnError)
	as := fs.String("as", args[1], "")
	api := fs.String("api", "symbols", "")
	var envs multiFlag
	fs.Var(&envs, "env", "")
	parseFlags(ts, holdUsage, fs, args[3:], 0)
	c := st.ctr(ts, args[1])
	if st.holders[*as] != nil {
		ts.Fatalf("hold: a holder %s exists (release it first)", *as)
	}
	env := ""
	for _, kv := range envs {
		if !strings.Contains(kv, "=") || strings.ContainsAny(kv, "'\n") {
			ts.Fatalf("--env=%q is not K=V (no quote, no newline)\nusage: %s", kv, holdUsage)
		}
		env += "'" + kv + "' "
	}
	h := &holder{name: *as, container: args[1], c: c, files: "/tmp/limitbed-hold-" + *as, done: make(chan error, 1)}
	f := h.files
	cmd := fmt.Sprintf(`rm -f %[1]s.*; env %[2]s %[3]s/cudaprobe --mib %[4]s --api=%[5]s --hold-until-signal > %[1]s.out 2> %[1]s.err & echo $! > %[1]s.pid
while ! grep -q '^{' %[1]s.out 2>/dev/null && kill -0 $! 2>/dev/null; do sleep 0.02; done; date +%%s.%%N > %[1]s.at
wait $!; echo $? > %[1]s.rc`, f, env, node.ToolDir, args[2], *api)
	go func() {
		_, err := launch.Run(context.Background(), c, m, cmd)
		h.done <- err
	}()
	st.holders[*as] = h
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	for {
		res, err := c.Exec(ctx, []string{"sh", "-c", "test -s " + f + ".at && grep '^{' " + f + ".out"}, sandbox.ExecOptions{})
		ts.Check(err)
		if line := bytes.TrimSpace(res.Stdout); len(line) > 0 {
			var p probeResult
			ts.Check(json.Unmarshal(line, &p))
			fmt.Fprintf(ts.Stdout(), "%s\n", line)
			if p.Error != nil || p.GrantedMiB != p.RequestedMiB {
				ts.Fatalf("hold via %s: the holder's %d MiB were not granted (%s)", args[0], p.RequestedMiB, deref(p.Error))
			}
			return
		}
		select {
		case err := <-h.done:
			stderr, _ := h.read(context.Background(), ".err")
			ts.Fatalf("hold via %s: the holder ended before reporting: %v\n%s", args[0], err, stderr)
		case <-ctx.Done():
			ts.Fatalf("hold via %s: no report: %v", args[0], ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// cmdRelease ends the holder NAME.
func cmdRelease(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: release NAME")
	}
	st := getState(ts)
	h := st.holders[args[0]]
	if h == nil {
		ts.Fatalf("release: no holder %s", args[0])
	}
	h.stop(context.Background())
	delete(st.holders, args[0])
}

const heldUsage = "held NAME | ! held NAME"

// cmdHeld asserts the holder NAME still runs; negated, that it ended by SIGKILL (waiting up to
// 30 s for it), and forgets it. When the kill happened is the monitor's to say (monitor over).
func cmdHeld(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: %s", heldUsage)
	}
	st := getState(ts)
	h := st.holders[args[0]]
	if h == nil {
		ts.Fatalf("held: no holder %s", args[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !neg {
		res, err := h.c.Exec(ctx, []string{"sh", "-c", "kill -0 $(cat " + h.files + ".pid)"}, sandbox.ExecOptions{})
		ts.Check(err)
		if res.ExitCode != 0 {
			rc, _ := h.read(ctx, ".rc")
			ts.Fatalf("holder %s does not run any more (exit status %q)", args[0], rc)
		}
		return
	}
	for {
		rc, err := h.read(ctx, ".rc")
		ts.Check(err)
		if rc != "" {
			if rc != "137" {
				ts.Fatalf("holder %s ended with status %s, want 137 (SIGKILL)", args[0], rc)
			}
			break
		}
		select {
		case <-ctx.Done():
			ts.Fatalf("holder %s still runs", args[0])
		case <-time.After(50 * time.Millisecond):
		}
	}
	ts.Logf("holder %s ended by SIGKILL", args[0])
	delete(st.holders, args[0])
}

// multiFlag collects a repeated string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }
