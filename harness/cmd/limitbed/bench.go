package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/harness/computebench"
	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/schedproto"
)

// runGateBench: `limitbed bench gate`: the instructions libvgpu.so adds to a launch, natively, with
// the library alone and while its container holds the scheduler's slice (computebench.GateCost).
func runGateBench(ctx context.Context, env *cliEnv, args []string) error {
	fs := flag.NewFlagSet("bench gate", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	root := fs.String("root", "", "repository root (default: found from the working directory)")
	build := fs.String("build", "", "C build directory (default: ROOT/build)")
	n := fs.Int("n", 10000, "launches per measured run")
	if err := fs.Parse(args); err != nil {
		return &exitError{2, err}
	}
	if os.Geteuid() != 0 {
		return &exitError{2, fmt.Errorf("bench gate needs root (the container's private mount namespace)")}
	}
	r, b, err := buildPaths(*root, *build, "bin/hamicore-allocprobe", "lib/libvgpu.so")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "limitbed-gate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	g := &computebench.GateCost{AllocProbe: filepath.Join(b, "bin", "hamicore-allocprobe"), Preload: filepath.Join(b, "lib", "libvgpu.so"),
		Lib: filepath.Join(b, "lib"), ProfileDir: filepath.Join(r, "fakegpu", "profiles"),
		Privatens: filepath.Join(r, "hamicore", "test", "privatens"), Dir: dir, N: *n, Logger: klog.Background().V(4)}
	f, err := g.Run(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "| instructions per cuLaunchKernel (fakegpu, N=%d, callgrind: the launch loop only) | per launch | added | target |\n|---|---|---|---|\n", *n)
	fmt.Fprintf(env.stdout, "| without libvgpu.so | %d | — | — |\n", f.Native)
	fmt.Fprintf(env.stdout, "| with libvgpu.so, no scheduler, nothing limited | %d | %d | ≤ 50 |\n", f.Library, f.Library-f.Native)
	fmt.Fprintf(env.stdout, "| with libvgpu.so, the scheduler letting the container launch (the held slice's path) | %d | %d | ≤ 50 |\n", f.Held, f.Held-f.Native)
	return nil
}

// runPodFiles: `limitbed bench pod`: the files the device plugin writes at Allocate for a container
// on a node with the compute scheduler (its limits file, cache directory and grant file, written
// by the plugin's own Allocate), for
// processes started by hand on a real GPU (scripts/gpu-check.sh, section sched).
func runPodFiles(env *cliEnv, args []string) error {
	fs := flag.NewFlagSet("bench pod", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	hook := fs.String("hook", "", "the node's hook path: files go to HOOK/vgpu/containers and HOOK/vgpu/sched (required)")
	gpu := fs.String("gpu", "", "the container's GPU: its UUID, as nvidia-smi --query-gpu=uuid prints it (required)")
	spec := fs.String("container", "", "the container: name=N,limit=L[,policy=force|default|disable][,priority=P] (required); its key is N_main")
	if err := fs.Parse(args); err != nil {
		return &exitError{2, err}
	}
	if *hook == "" || *gpu == "" || *spec == "" || fs.NArg() > 0 {
		return &exitError{2, fmt.Errorf("bench pod: --hook, --gpu and --container are required (and nothing else)")}
	}
	c, err := computebench.ParseContainer(*spec, 0)
	if err != nil {
		return &exitError{2, fmt.Errorf("--container: %w", err)}
	}
	if c.Policy == "none" {
		return &exitError{2, fmt.Errorf("--container: policy none has no files")}
	}
	_, resp, err := computebench.RecordContainer(*hook, c, *gpu)
	if err != nil {
		return &exitError{1, fmt.Errorf("bench pod: %w", err)}
	}
	fmt.Fprintf(env.stdout, "%s %s %s\n", computebench.MountHost(resp, paths.ContainerVGPUDir),
		computebench.MountHost(resp, limitsfile.ContainerMountPath), computebench.MountHost(resp, schedproto.ContainerGrantPath))
	return nil
}

// runBench: `limitbed bench compute|drivertruth|gate|pod`: compute runs each workload alone per
// policy, or with --container/--scenario several containers sharing fakegpu's GPUs (shared.go).
func runBench(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "drivertruth":
			return runDriverTruth(ctx, env, args[1:])
		case "gate":
			return runGateBench(ctx, env, args[1:])
		case "pod":
			return runPodFiles(env, args[1:])
		case "compute":
			return runComputeBench(ctx, env, args[1:])
		}
	}
	return &exitError{2, fmt.Errorf("usage: limitbed bench compute|drivertruth|gate|pod [flags] (run with -h for the flags)")}
}

// computeFlags are `limitbed bench compute`'s flags: the single-container runs' and the
// shared-GPU runs' (sharedFlags takes those).
type computeFlags struct {
	root, build, limits, workloads, policies, scenario, profile, schedBin string
	records, section                                                      string
	real, perWindow, asJSON, scheduler                                    bool
	seconds                                                               int
	tol                                                                   float64
	specs, extraEnv                                                       stringList
	set                                                                   map[string]bool // the flags given
}

func runComputeBench(ctx context.Context, env *cliEnv, args []string) error {
	f, err := parseComputeFlags(env, args)
	if err != nil {
		return err
	}
	if len(f.specs) > 0 || f.scenario != "" {
		return runShared(ctx, env, sharedFlags{specs: f.specs, scenario: f.scenario, profile: f.profile, root: f.root, build: f.build,
			real: f.real, seconds: f.seconds, secondsSet: f.set["seconds"], tol: f.tol, json: f.asJSON, perWindow: f.perWindow, env: f.extraEnv,
			scheduler: f.scheduler, schedBin: f.schedBin})
	}
	plan, err := f.plan()
	if err != nil {
		return &exitError{2, err}
	}
	return runCompute(ctx, env, f, plan)
}

func parseComputeFlags(env *cliEnv, args []string) (*computeFlags, error) {
	f := &computeFlags{set: map[string]bool{}}
	fs := flag.NewFlagSet("bench compute", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.StringVar(&f.root, "root", "", "repository root (default: found from the working directory)")
	fs.StringVar(&f.build, "build", "", "C build directory holding lib/libvgpu.so and bin/hamicore-launchprobe (default: ROOT/build)")
	fs.BoolVar(&f.real, "real", false, "run on this machine's GPU and driver instead of fakegpu")
	fs.IntVar(&f.seconds, "seconds", 12, "length of each run (the first 2 s are not judged; 12 gives one 10 s window)")
	fs.StringVar(&f.limits, "limits", "30,60", "comma-separated CUDA_DEVICE_SM_LIMIT values for force (disable and default use the first)")
	fs.StringVar(&f.workloads, "workloads", strings.Join(computebench.Workloads, ","), "comma-separated workloads: uniform, mix, graph")
	fs.StringVar(&f.policies, "policies", "force,disable,default", "comma-separated policies")
	fs.Float64Var(&f.tol, "tolerance", 0.02, "force: every 10 s window within the limit ± this; disable and default alone: ≥ 0.95")
	fs.BoolVar(&f.perWindow, "windows", false, "also print every 1 s ratio")
	fs.StringVar(&f.records, "records", "", "single-container runs: also write each run as a GPU-tier check and series into this run directory (docs/gpu-report.md)")
	fs.StringVar(&f.section, "section", "compute", "with --records: the section the checks belong to")
	fs.Var(&f.specs, "container", "a container on a shared fakegpu host (repeat for each): key=value,... with keys "+
		"name gpu limit policy (force|default|disable|none) priority start workload (uniform|mix|graph|burst) kernel-us burst procs want min")
	fs.StringVar(&f.scenario, "scenario", "", "a named shared-GPU scenario (list: --scenario list)")
	fs.StringVar(&f.profile, "profile", "", "fakegpu profile of a shared-GPU run (default a16-16q; 8x-h100-80g has eight GPUs)")
	fs.BoolVar(&f.asJSON, "json", false, "shared-GPU runs: print the result as JSON (machine-readable) instead of the table")
	fs.Var(&f.extraEnv, "env", "shared-GPU runs: KEY=VALUE for every process (repeat), e.g. FAKEGPU_NVML_SAMPLES=periodic")
	fs.BoolVar(&f.scheduler, "scheduler", false, "shared-GPU runs: as on a node with vgpu-scheduler (root: each container in a private mount namespace with its grant file)")
	fs.StringVar(&f.schedBin, "scheduler-binary", "", "with --scheduler: run this vgpu-scheduler as a process and print its CPU time (default BUILD/bin/vgpu-scheduler if it exists, else the scheduler runs in this process)")
	if err := fs.Parse(args); err != nil {
		return nil, &exitError{2, err}
	}
	if fs.NArg() > 0 {
		return nil, &exitError{2, fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	return f, nil
}

// plan checks --limits, --workloads, --policies and --seconds and makes the runs of them.
func (f *computeFlags) plan() ([]computebench.Case, error) {
	var ls []int
	for _, v := range strings.Split(f.limits, ",") {
		l, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || l < 1 || l > 99 {
			return nil, fmt.Errorf("--limits %q: %q is not a percent 1..99", f.limits, v)
		}
		ls = append(ls, l)
	}
	ws := strings.Split(f.workloads, ",")
	for _, w := range ws {
		if !contains(computebench.Workloads, w) {
			return nil, fmt.Errorf("--workloads: unknown workload %q (known: %v)", w, computebench.Workloads)
		}
	}
	ps := strings.Split(f.policies, ",")
	for _, p := range ps {
		if !contains([]string{"force", "disable", "default"}, p) {
			return nil, fmt.Errorf("--policies: unknown policy %q (known: force, disable, default)", p)
		}
	}
	if f.seconds < 3 {
		return nil, fmt.Errorf("--seconds %d: at least 3 (the first 2 s are not judged)", f.seconds)
	}
	return computebench.Plan(ws, ps, ls), nil
}

// runCompute runs the plan, one container at a time, on fakegpu or (--real) this machine's GPU.
func runCompute(ctx context.Context, env *cliEnv, f *computeFlags, plan []computebench.Case) error {
	root, build, err := buildPaths(f.root, f.build, "bin/hamicore-launchprobe", "lib/libvgpu.so")
	if err != nil {
		return err
	}
	probe, lib := filepath.Join(build, "bin", "hamicore-launchprobe"), filepath.Join(build, "lib", "libvgpu.so")
	dir, err := os.MkdirTemp("", "limitbed-bench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	r := &computebench.Runner{Probe: probe, Preload: lib, Seconds: f.seconds, Dir: dir, Logger: klog.Background().V(4)}
	where := "a real GPU"
	if f.real {
		r.Env = driverEnv(os.Environ())
	} else {
		where = "fakegpu"
		r.Env = []string{"LD_LIBRARY_PATH=" + filepath.Join(build, "lib"), "FAKEGPU_PROFILE=a16-16q",
			"FAKEGPU_PROFILE_DIR=" + filepath.Join(root, "fakegpu", "profiles"), "FAKEGPU_STATE_DIR=" + filepath.Join(dir, "gpu")}
	}
	fmt.Fprintf(env.stdout, "compute limit on %s: %d runs of %d s; achieved/unlimited, judged after the first %d s\n",
		where, len(plan), f.seconds, computebench.SkipWindows)
	outs, err := r.RunAll(ctx, plan, f.tol, env.stderr)
	computebench.Report(env.stdout, outs, f.perWindow)
	if f.records != "" {
		if rerr := computeRecords(f.records, f.section, outs); rerr != nil {
			return &exitError{2, fmt.Errorf("bench compute --records: %w", rerr)}
		}
	}
	if err != nil {
		return fmt.Errorf("bench compute: %w", err)
	}
	bad := 0
	for _, o := range outs {
		if !o.OK {
			bad++
		}
	}
	if bad > 0 {
		return &exitError{1, fmt.Errorf("%d of %d limited runs out of bounds", bad, len(outs))}
	}
	fmt.Fprintln(env.stdout, "bench compute: every run within bounds")
	return nil
}

// buildPaths fills in the repository root and the C build directory and checks that the build
// holds what the bench runs.
func buildPaths(root, build string, need ...string) (string, string, error) {
	if root == "" {
		r, err := sandbox.RepoRoot()
		if err != nil {
			return "", "", &exitError{2, err}
		}
		root = r
	}
	if build == "" {
		build = filepath.Join(root, "build")
	}
	for _, n := range need {
		if _, err := os.Stat(filepath.Join(build, n)); err != nil {
			return "", "", &exitError{2, fmt.Errorf("%w (build it: make c OUT=%s)", err, build)}
		}
	}
	return root, build, nil
}

// driverEnv is what a --real run passes on to its workloads from this process's environment: where
// the driver is (LD_LIBRARY_PATH; fakegpu's variables when the "driver" is fakegpu, as in the GPU
// tier's self-test) and which GPU (CUDA_VISIBLE_DEVICES). Nothing else: the library's variables
// are the run's own.
func driverEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if k == "LD_LIBRARY_PATH" || k == "CUDA_VISIBLE_DEVICES" || strings.HasPrefix(k, "FAKEGPU_") {
			out = append(out, kv)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
