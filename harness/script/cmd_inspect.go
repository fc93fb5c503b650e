package script

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/limitbed/limitbed/harness/launch"
	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/allocate"
	"github.com/limitbed/limitbed/plugin/monitor"
)

// holder is a process keeping memory allocated in a container until released.
type holder struct {
	c    sandbox.Container
	done chan error
}

const holdFiles = "/tmp/limitbed-hold"

func (h *holder) stop(ctx context.Context) {
	_, _ = h.c.Exec(ctx, []string{"sh", "-c", `kill "$(cat ` + holdFiles + `.pid)"`}, sandbox.ExecOptions{})
	select {
	case <-h.done:
	case <-time.After(30 * time.Second):
	}
}

const holdUsage = "hold METHOD NAME MIB"

// cmdHold starts `cudaprobe --mib MIB --hold-until-signal` through METHOD in NAME and returns once
// it reported its allocation granted; release ends it. One holder per container.
func cmdHold(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: %s", holdUsage)
	}
	st := getState(ts)
	m, err := launch.Lookup(args[0])
	if err != nil {
		ts.Fatalf("%v\nusage: %s", err, holdUsage)
	}
	c := st.ctr(ts, args[1])
	if st.holders[args[1]] != nil {
		ts.Fatalf("hold: container %s already has a holder (release it first)", args[1])
	}
	h := &holder{c: c, done: make(chan error, 1)}
	cmd := fmt.Sprintf(`%s/cudaprobe --mib %s --hold-until-signal > %s.out & echo $! > %s.pid; wait`, node.ToolDir, args[2], holdFiles, holdFiles)
	go func() {
		_, err := launch.Run(context.Background(), c, m, cmd)
		h.done <- err
	}()
	st.holders[args[1]] = h
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	for {
		res, err := c.Exec(ctx, []string{"sh", "-c", "grep '^{' " + holdFiles + ".out 2>/dev/null"}, sandbox.ExecOptions{})
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
			ts.Fatalf("hold via %s: the holder ended before reporting: %v", args[0], err)
		case <-ctx.Done():
			ts.Fatalf("hold via %s: no report: %v", args[0], ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// cmdRelease ends the holder of NAME.
func cmdRelease(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: release NAME")
	}
	st := getState(ts)
	h := st.holders[args[0]]
	if h == nil {
		ts.Fatalf("release: no holder in %s", args[0])
	}
	h.stop(context.Background())
	delete(st.holders, args[0])
}

// cmdRegion prints the pod's usage.cache as regiondump sees it on the host (the limits, and one
// slot per process that joined). With !, the pod must have no region.
func cmdRegion(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: region NAME")
	}
	st := getState(ts)
	_, host := st.pod(ts, args[0]).CacheFile()
	if host == "" {
		if !neg {
			ts.Fatalf("region %s: the allocation names no shared cache", args[0])
		}
		return
	}
	out, err := exec.Command(filepath.Join(st.artifacts.Bin, "regiondump"), host).CombinedOutput()
	switch {
	case err != nil && !neg:
		ts.Fatalf("regiondump %s: %v\n%s", host, err, out)
	case err == nil && neg:
		ts.Fatalf("region %s: exists, want none", args[0])
	}
	_, _ = ts.Stdout().Write(append(out, '\n'))
}

const hostfileUsage = "hostfile NAME [--write=FILE]"

// cmdHostfile prints the pod's limits file on the host (<HOOK_PATH>/vgpu/containers/
// <podUID>_<ctr>.limits); --write=FILE overwrites it in place, as an administrator editing it by
// hand would (the bind mount keeps showing the same inode). With !, the file must not exist.
func cmdHostfile(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("hostfile", flag.ContinueOnError)
	write := fs.String("write", "", "")
	name := parseFlags(ts, hostfileUsage, fs, reorder(args), 1)[0]
	st := getState(ts)
	path := st.pod(ts, name).LimitsFile
	if *write != "" {
		if neg {
			ts.Fatalf("usage: %s", hostfileUsage)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		ts.Check(err)
		_, err = f.WriteString(ts.ReadFile(*write))
		ts.Check(err)
		ts.Check(f.Close())
		return
	}
	data, err := os.ReadFile(path)
	switch {
	case err != nil && !neg:
		ts.Fatalf("hostfile %s: %v", name, err)
	case err == nil && neg:
		ts.Fatalf("hostfile %s: %s exists, want none", name, path)
	}
	_, _ = ts.Stdout().Write(data)
}

// cmdLimitsfile prints /overrideEnv as the container sees it. With !, the container must have none.
func cmdLimitsfile(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: limitsfile NAME")
	}
	c := getState(ts).ctr(ts, args[0])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.Exec(ctx, []string{"cat", "/overrideEnv"}, sandbox.ExecOptions{})
	ts.Check(err)
	switch {
	case res.ExitCode != 0 && !neg:
		ts.Fatalf("limitsfile %s: %s", args[0], res.Stderr)
	case res.ExitCode == 0 && neg:
		ts.Fatalf("limitsfile %s: /overrideEnv exists, want none", args[0])
	}
	_, _ = ts.Stdout().Write(res.Stdout)
}

// cmdMonitor runs the vGPU monitor (plugin/monitor) over the node's containers directory.
// "monitor sweep": one sweep against the API server's pods, with no grace period; it prints what
// it removed and then the directory's remaining entries. "monitor scrape": one metrics scrape (see
// monitorScrape).
func cmdMonitor(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 || (args[0] != "sweep" && args[0] != "scrape") {
		ts.Fatalf("usage: monitor sweep|scrape")
	}
	st := getState(ts)
	if st.node == nil {
		ts.Fatalf("monitor %s: no node (plugin start first)", args[0])
	}
	if args[0] == "scrape" {
		monitorScrape(ts, st)
		return
	}
	dir := allocate.ContainersDir(st.node.HookPath)
	// No grace: one sweep removes what it finds dead (the grace is measured between sweeps).
	s := &monitor.Sweeper{Dir: dir, API: &monitor.APIPods{Kube: st.node.Kube(), NodeName: node.Name},
		Logger: logr.FromSlogHandler(st.logger.Handler())}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.Sweep(ctx)
	ts.Check(err)
	for _, k := range []monitor.Kind{monitor.KindDir, monitor.KindLimits, monitor.KindTemp} {
		fmt.Fprintf(ts.Stdout(), "removed %s %d\n", k, res.Removed[k])
	}
	entries, err := os.ReadDir(dir)
	ts.Check(err)
	for _, e := range entries {
		fmt.Fprintf(ts.Stdout(), "left %s\n", strings.TrimSpace(e.Name()))
	}
}
