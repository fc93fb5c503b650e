package script

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/monitor"
	"github.com/limitbed/limitbed/plugin/paths"
)

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
	res, err := c.Exec(ctx, []string{"cat", limitsfile.ContainerMountPath}, sandbox.ExecOptions{})
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
// monitorScrape). The vgpu-monitor binary running beside the node: cmdMonitorAgent.
func cmdMonitor(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) > 0 && args[0] != "sweep" && args[0] != "scrape" {
		cmdMonitorAgent(ts, neg, args)
		return
	}
	if neg || len(args) != 1 {
		ts.Fatalf("usage: %s", monitorUsage)
	}
	st := getState(ts)
	if st.node == nil {
		ts.Fatalf("monitor %s: no node (plugin start first)", args[0])
	}
	if args[0] == "scrape" {
		monitorScrape(ts, st)
		return
	}
	dir := paths.ContainersDir(st.node.HookPath)
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
