package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/harness/computebench"
)

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, " ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

type sharedFlags struct {
	specs, env                     []string
	scenario, profile, root, build string
	real, secondsSet, json         bool
	perWindow, scheduler           bool
	schedBin                       string
	seconds                        int
	tol                            float64
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// runShared: `limitbed bench compute --container … | --scenario NAME`: several containers on the
// GPUs of one fakegpu host, each judged by fakegpu's record of its completed work.
func runShared(ctx context.Context, env *cliEnv, f sharedFlags) error {
	if f.real {
		return &exitError{2, fmt.Errorf("--container/--scenario run on fakegpu only: its device-side record of completed work is the judge (on a real GPU, judge by the workload's own count: scripts/gpu-check.sh)")}
	}
	if f.scenario == "list" {
		fmt.Fprintln(env.stdout, computebench.ScenarioNames())
		return nil
	}
	sc, err := sharedScenario(f)
	if err != nil {
		return &exitError{2, err}
	}
	root, build, err := buildPaths(f.root, f.build, "bin/hamicore-launchprobe", "bin/gpuwork", "lib/libvgpu.so")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "limitbed-bench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	r := &computebench.SharedRunner{
		Probe: filepath.Join(build, "bin", "hamicore-launchprobe"), Preload: filepath.Join(build, "lib", "libvgpu.so"),
		Work: filepath.Join(build, "bin", "gpuwork"), Lib: filepath.Join(build, "lib"),
		ProfileDir: filepath.Join(root, "fakegpu", "profiles"), Dir: dir, Env: f.env, Logger: klog.Background().V(4),
	}
	var sched *computebench.Scheduled
	if f.scheduler {
		if sched, err = sharedScheduler(f, root, build); err != nil {
			return err
		}
		r.Prepare = sched.Prepare
	}
	if !f.json {
		fmt.Fprintf(env.stderr, "bench: %s: %d containers, %.0f s (each workload first alone, unthrottled)\n", sc.Name, len(sc.Containers), sc.Seconds)
	}
	res, err := r.Run(ctx, sc, f.tol)
	if sched != nil {
		if cerr := sched.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("bench compute: %w", err)
	}
	return reportShared(env, f, sc, sched, res)
}

// sharedScenario is the run --scenario names or the --container flags describe, with --seconds
// and --profile applied and checked, and the --env flags checked.
func sharedScenario(f sharedFlags) (computebench.Scenario, error) {
	var sc computebench.Scenario
	switch {
	case f.scenario != "" && len(f.specs) > 0:
		return sc, fmt.Errorf("--scenario and --container together: give one")
	case f.scenario != "":
		s, ok := computebench.Scenarios()[f.scenario]
		if !ok {
			return sc, fmt.Errorf("--scenario %q: unknown (known: %s)", f.scenario, computebench.ScenarioNames())
		}
		sc = s
	default:
		sc = computebench.Scenario{Name: "command line", Seconds: computebench.ScenarioSeconds}
		for i, spec := range f.specs {
			c, err := computebench.ParseContainer(spec, i)
			if err != nil {
				return sc, fmt.Errorf("--container: %w", err)
			}
			sc.Containers = append(sc.Containers, c)
		}
	}
	if f.secondsSet {
		sc.Seconds = float64(f.seconds)
	}
	if f.profile != "" {
		sc.Profile = f.profile
	}
	if err := sc.Check(0); err != nil {
		return sc, err
	}
	for _, kv := range f.env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return sc, fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
	}
	return sc, nil
}

// sharedScheduler is --scheduler's node scheduler: the --scheduler-binary, else the build's
// vgpu-scheduler when there is one, else the scheduler in this process.
func sharedScheduler(f sharedFlags, root, build string) (*computebench.Scheduled, error) {
	if os.Geteuid() != 0 {
		return nil, &exitError{2, fmt.Errorf("--scheduler needs root (each container runs in a private mount namespace with its grant file)")}
	}
	bin := f.schedBin
	if bin == "" {
		if p := filepath.Join(build, "bin", "vgpu-scheduler"); fileExists(p) {
			bin = p
		}
	}
	return &computebench.Scheduled{Privatens: filepath.Join(root, "hamicore", "test", "privatens"), Binary: bin, Logger: klog.Background().V(2)}, nil
}

// reportShared prints the result (the table, or --json) and exits 1 when a container is out of its bounds.
func reportShared(env *cliEnv, f sharedFlags, sc computebench.Scenario, sched *computebench.Scheduled, res *computebench.Result) error {
	if sched != nil && sched.Binary != "" && !f.json {
		// The scheduler ran from the first container's start to the end (the baselines ran before).
		fmt.Fprintf(env.stdout, "vgpu-scheduler: %v of CPU over the %.0f s run: %.1f ms per second\n",
			sched.CPU().Round(time.Millisecond), sc.Seconds, float64(sched.CPU().Milliseconds())/sc.Seconds)
	}
	if f.json {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		computebench.ReportShared(env.stdout, res, f.perWindow)
		if sched != nil {
			// With every container busy and the limits summing to 100 %, the time a GPU was not
			// busy is what switching slices costs (docs/benchmarks.md, "The node scheduler").
			for _, g := range res.GPUs {
				fmt.Fprintf(env.stdout, "GPU %d busy after the first 2 s: %.3f\n", g.GPU, busyAfter(g.Busy, 2))
			}
		}
	}
	if !res.OK() {
		return &exitError{1, fmt.Errorf("a container out of its bounds")}
	}
	if !f.json {
		fmt.Fprintln(env.stdout, "bench compute: every judged container within bounds")
	}
	return nil
}

// busyAfter is the mean of the 1 s busy windows from the from-th on (a window without readings,
// -1, is left out); -1 when there is none.
func busyAfter(windows []float64, from int) float64 {
	sum, n := 0.0, 0
	for i := from; i < len(windows); i++ {
		if windows[i] >= 0 {
			sum, n = sum+windows[i], n+1
		}
	}
	if n == 0 {
		return -1
	}
	return sum / float64(n)
}
