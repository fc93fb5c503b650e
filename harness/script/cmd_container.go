package script

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/launch"
)

const containerUsage = "container start NAME | container stop NAME"

// cmdContainer starts the pod's container on the backend, as the runtime would from the Allocate
// response (plus the harness's tools in /usr/local/bin), and waits for its sshd and cron; or stops it.
func cmdContainer(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 || (neg && args[0] != "start") {
		ts.Fatalf("usage: %s", containerUsage)
	}
	st := getState(ts)
	name := args[1]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	switch args[0] {
	case "start":
		p, ok := st.pods[name]
		if neg {
			// ! container start: the pod must not be startable (its allocation failed).
			if ok {
				ts.Fatalf("container start %s: pod %s has an allocation, want none", name, name)
			}
			fmt.Fprintf(ts.Stderr(), "pod %s has no allocation: the kubelet does not start its container\n", name)
			return
		}
		if !ok {
			ts.Fatalf("no allocated pod %q (pod allocate %s first)", name, name)
		}
		if _, ok := st.ctrs[name]; ok {
			ts.Fatalf("container %s is running", name)
		}
		b := st.getBackend(ts)
		id := fmt.Sprintf("limitbed-%d-%s-%s", os.Getpid(), strings.TrimPrefix(st.dir, os.TempDir()+"/"), name)
		c, err := b.Start(ctx, st.node.ContainerSpec(p, id))
		ts.Check(err)
		st.ctrs[name] = c
		if id := sandbox.RuntimeID(c); id != "" && st.node != nil {
			// The kubelet's part: the pod's status names the container's runtime ID.
			ts.Check(st.node.ContainerStarted(ctx, name, id))
		}
		ts.Check(node.WaitReady(ctx, c, time.Minute))
		ts.Logf("container %s started on %s", name, b.Name())
	case "stop":
		c := st.ctr(ts, name)
		for hn, h := range st.holders {
			if h.container == name {
				h.Stop(ctx)
				delete(st.holders, hn)
			}
		}
		ts.Check(c.Stop(ctx))
		delete(st.ctrs, name)
	default:
		ts.Fatalf("usage: %s", containerUsage)
	}
}

func (st *state) ctr(ts *testscript.TestScript, name string) sandbox.Container {
	c, ok := st.ctrs[name]
	if !ok {
		ts.Fatalf("no running container %q (container start %s first)", name, name)
	}
	return c
}

// run starts command through method in container name, with the harness's tools on PATH (cron's
// PATH lacks /usr/local/bin). Unsupported methods fail naming the backend.
func (st *state) run(ts *testscript.TestScript, method, name, command string) launch.Result {
	m, err := launch.Lookup(method)
	if err != nil {
		ts.Fatalf("%v", err)
	}
	c := st.ctr(ts, name)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	res, err := launch.Run(ctx, c, m, "PATH="+node.ToolDir+":$PATH; "+command)
	ts.Check(err)
	return res
}

const launchUsage = "launch METHOD NAME -- COMMAND..."

// cmdLaunch runs COMMAND (joined into one shell line) through METHOD in container NAME; its
// stdout and stderr become the script's stdout and stderr. A non-zero exit fails unless negated.
func cmdLaunch(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 4 || args[2] != "--" {
		ts.Fatalf("usage: %s", launchUsage)
	}
	res := getState(ts).run(ts, args[0], args[1], strings.Join(args[3:], " "))
	_, _ = ts.Stdout().Write(res.Stdout)
	_, _ = ts.Stderr().Write(res.Stderr)
	switch {
	case res.ExitCode != 0 && !neg:
		ts.Fatalf("launch %s %s: exit %d", args[0], args[1], res.ExitCode)
	case res.ExitCode == 0 && neg:
		ts.Fatalf("launch %s %s: unexpected success", args[0], args[1])
	}
}

// probeResult is cudaprobe's JSON line.
type probeResult struct {
	Method       string  `json:"-"`
	RequestedMiB int     `json:"requested_mib"`
	GrantedMiB   int     `json:"granted_mib"`
	Error        *string `json:"error"`
	TotalMiB     int     `json:"total_mib"`
	PID          int     `json:"pid"`
}

const probeUsage = "probe METHOD NAME MIB [--env=KEY=VALUE]..."

// cmdProbe runs `cudaprobe --mib MIB` through METHOD in NAME and keeps its report for granted and
// refused; the JSON line goes to stdout, libvgpu.so's log to stderr. Each --env sets a variable in
// the probe's own environment, after the launch method made it (as a process sets its own).
func cmdProbe(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: %s", probeUsage)
	}
	if _, err := strconv.Atoi(args[2]); err != nil {
		ts.Fatalf("MIB %q: %v\nusage: %s", args[2], err, probeUsage)
	}
	command := "cudaprobe --mib " + args[2]
	for _, a := range args[3:] {
		kv, ok := strings.CutPrefix(a, "--env=")
		if !ok || !strings.Contains(kv, "=") || strings.ContainsAny(kv, "'\n") {
			ts.Fatalf("%q is not --env=KEY=VALUE (no quote, no newline)\nusage: %s", a, probeUsage)
		}
		command = "env '" + kv + "' " + command
	}
	st := getState(ts)
	res := st.run(ts, args[0], args[1], command)
	_, _ = ts.Stdout().Write(res.Stdout)
	_, _ = ts.Stderr().Write(res.Stderr)
	if res.ProbeJSON == nil {
		ts.Fatalf("probe %s %s: no JSON line from cudaprobe (exit %d)", args[0], args[1], res.ExitCode)
	}
	var p probeResult
	ts.Check(json.Unmarshal(res.ProbeJSON, &p))
	p.Method = args[0]
	st.lastProbe = &p
	ts.Logf("probe via %s as %s: granted %d of %d MiB, total %d MiB", args[0], res.User, p.GrantedMiB, p.RequestedMiB, p.TotalMiB)
}

const grantedUsage = "granted [--total=MIB]"

// cmdGranted asserts the last probe got all it asked for (and, with --total, that CUDA reported
// that total: the card's memory for an uncapped process).
func cmdGranted(ts *testscript.TestScript, neg bool, args []string) {
	p := getState(ts).last(ts, neg, args, grantedUsage)
	if p.Error != nil || p.GrantedMiB != p.RequestedMiB {
		ts.Fatalf("probe via %s: want %d MiB granted, got %d (%v)", p.Method, p.RequestedMiB, p.GrantedMiB, deref(p.Error))
	}
	checkTotal(ts, p, args)
}

const refusedUsage = "refused [--total=MIB]"

// cmdRefused asserts the last probe's allocation was refused (and, with --total, the total CUDA
// reported: the limit for a capped process).
func cmdRefused(ts *testscript.TestScript, neg bool, args []string) {
	p := getState(ts).last(ts, neg, args, refusedUsage)
	if p.Error == nil || p.GrantedMiB >= p.RequestedMiB {
		ts.Fatalf("probe via %s: want the %d MiB allocation refused, got %d MiB granted", p.Method, p.RequestedMiB, p.GrantedMiB)
	}
	checkTotal(ts, p, args)
}

func (st *state) last(ts *testscript.TestScript, neg bool, args []string, usage string) *probeResult {
	if neg || len(args) > 1 || (len(args) == 1 && !strings.HasPrefix(args[0], "--total=")) {
		ts.Fatalf("usage: %s", usage)
	}
	if st.lastProbe == nil {
		ts.Fatalf("no probe yet (probe METHOD NAME MIB first)")
	}
	return st.lastProbe
}

func checkTotal(ts *testscript.TestScript, p *probeResult, args []string) {
	if len(args) == 0 {
		return
	}
	want, err := strconv.Atoi(strings.TrimPrefix(args[0], "--total="))
	if err != nil {
		ts.Fatalf("%s: %v", args[0], err)
	}
	if p.TotalMiB != want {
		ts.Fatalf("probe via %s: CUDA reported %d MiB total, want %d", p.Method, p.TotalMiB, want)
	}
}

func deref(s *string) string {
	if s == nil {
		return "no error"
	}
	return *s
}
