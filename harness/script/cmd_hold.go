package script

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/limitbed/limitbed/harness/hold"
	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/plugin/launch"
)

// holder is a hold.Holder of a script's container.
type holder struct {
	*hold.Holder
	container string
}

const holdUsage = "hold METHOD CONTAINER MIB [--as=NAME] [--api=symbols|dlsym|procaddress|dlvsym|dlmopen] [--env=K=V]... [--probe-arg=--FLAG]..."

// cmdHold starts `cudaprobe --mib MIB --hold-until-signal` through METHOD in CONTAINER and returns
// once it reported its allocation granted; release ends it. A holder is named by --as (default:
// the container's name); a container may have several. --api picks how cudaprobe reaches the
// driver (the bypasses of docs/attacks.md among them); each --env is set in its own environment;
// each --probe-arg is one more cudaprobe flag (--leader-exits). The holder's pod and PID are kept
// for reusepid.
func cmdHold(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: %s", holdUsage)
	}
	st := getState(ts)
	m, err := launch.Lookup(args[0])
	if err != nil {
		ts.Fatalf("%v\nusage: %s", err, holdUsage)
	}
	mib, err := strconv.Atoi(args[2])
	if err != nil {
		ts.Fatalf("MIB %q: %v\nusage: %s", args[2], err, holdUsage)
	}
	fs := flag.NewFlagSet("hold", flag.ContinueOnError)
	as := fs.String("as", args[1], "")
	api := fs.String("api", "symbols", "")
	var envs, probeArgs multiFlag
	fs.Var(&envs, "env", "")
	fs.Var(&probeArgs, "probe-arg", "")
	parseFlags(ts, holdUsage, fs, args[3:], 0)
	c := st.ctr(ts, args[1])
	if st.holders[*as] != nil {
		ts.Fatalf("hold: a holder %s exists (release it first)", *as)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	h, err := hold.Start(ctx, c, m, hold.Spec{Name: *as, Cudaprobe: node.ToolDir + "/cudaprobe", MiB: mib, API: *api, Env: envs, Args: probeArgs})
	ts.Check(err)
	st.holders[*as] = &holder{Holder: h, container: args[1]}
	fmt.Fprintf(ts.Stdout(), "%s\n", h.Report)
	var p probeResult
	ts.Check(json.Unmarshal(h.Report, &p))
	if p.Error != nil || p.GrantedMiB != p.RequestedMiB {
		ts.Fatalf("hold via %s: the holder's %d MiB were not granted (%s)", args[0], p.RequestedMiB, deref(p.Error))
	}
	st.killable[*as] = killable{pod: args[1], nspid: p.PID}
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
	h.Stop(context.Background())
	delete(st.holders, args[0])
}

const heldUsage = "held NAME | ! held NAME [--within=PERIODS]"

// cmdHeld asserts the holder NAME still runs; negated, that it ended by SIGKILL (waiting up to
// 30 s for it) and, with --within, no later than PERIODS of the running monitor's periods after
// its allocation was granted (both times by the container's clock); then forgets it.
func cmdHeld(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 0 || (!neg && len(args) != 1) {
		ts.Fatalf("usage: %s", heldUsage)
	}
	fs := flag.NewFlagSet("held", flag.ContinueOnError)
	within := fs.Int("within", 0, "")
	parseFlags(ts, heldUsage, fs, args[1:], 0)
	st := getState(ts)
	h := st.holders[args[0]]
	if h == nil {
		ts.Fatalf("held: no holder %s", args[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !neg {
		running, err := h.Running(ctx)
		ts.Check(err)
		if !running {
			ts.Fatalf("holder %s does not run any more", args[0])
		}
		return
	}
	rc, err := h.Ended(ctx)
	ts.Check(err)
	if rc != "137" {
		ts.Fatalf("holder %s ended with status %s, want 137 (SIGKILL)", args[0], rc)
	}
	if *within > 0 {
		granted, err := h.GrantedAt(ctx)
		ts.Check(err)
		ended, err := h.EndedAt(ctx)
		ts.Check(err)
		bound := time.Duration(*within) * st.agent(ts).Period
		if took := ended.Sub(granted); took > bound {
			ts.Fatalf("holder %s was killed %v after its allocation, want within %d periods (%v)", args[0], took.Round(time.Millisecond), *within, bound)
		}
		ts.Logf("holder %s killed by SIGKILL %v after its allocation (bound %v)", args[0], ended.Sub(granted).Round(time.Millisecond), bound)
	}
	ts.Logf("holder %s ended by SIGKILL", args[0])
	delete(st.holders, args[0])
}

// multiFlag collects a repeated string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }
