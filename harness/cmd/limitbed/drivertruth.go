package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/harness/drivertruth"
	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/limitsfile"
)

// runDriverTruth: `limitbed bench drivertruth`, the node's driver-truth accounting against this
// machine's GPU (--real) or fakegpu: the driver's per-process figures beside the monitor's
// attribution for an honest process and a bypassing one.
func runDriverTruth(ctx context.Context, env *cliEnv, args []string) error {
	fs := flag.NewFlagSet("bench drivertruth", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	root := fs.String("root", "", "repository root (default: found from the working directory)")
	build := fs.String("build", "", "C build directory: lib/libvgpu.so, and bin/cudaprobe (fakegpu) or bin-real/cudaprobe (--real) (default: ROOT/build)")
	real := fs.Bool("real", false, "run on this machine's GPU and driver instead of fakegpu")
	kill := fs.Bool("kill", false, "enforcement kill: the bypass must be SIGKILLed, the others left running")
	allowance := fs.String("allowance", "1g", "context allowance per process, in the limits' memory grammar")
	nvmlLib := fs.String("nvml-library", "", "libnvidia-ml.so.1 to read (default: the driver's with --real, fakegpu's otherwise)")
	if err := fs.Parse(args); err != nil {
		return &exitError{2, err}
	}
	if fs.NArg() > 0 {
		return &exitError{2, fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	allow, err := limitsfile.ParseMemory(*allowance)
	if err != nil {
		return &exitError{2, fmt.Errorf("--allowance: %w", err)}
	}
	if *root == "" {
		r, err := sandbox.RepoRoot()
		if err != nil {
			return &exitError{2, err}
		}
		*root = r
	}
	if *build == "" {
		*build = filepath.Join(*root, "build")
	}
	o := drivertruth.Options{Library: filepath.Join(*build, "lib", "libvgpu.so"), Allowance: allow, Kill: *kill, Out: env.stdout,
		Logger: klog.Background().V(4)}
	if *real {
		o.Cudaprobe = filepath.Join(*build, "bin-real", "cudaprobe")
	} else {
		o.Cudaprobe = filepath.Join(*build, "bin", "cudaprobe")
		state, err := os.MkdirTemp("", "limitbed-drivertruth-gpu-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(state)
		fake := map[string]string{"FAKEGPU_PROFILE": "a16-16q", "FAKEGPU_PROFILE_DIR": filepath.Join(*root, "fakegpu", "profiles"), "FAKEGPU_STATE_DIR": state}
		for k, v := range fake { // this process's NVML (fakegpu) reads them too
			if err := os.Setenv(k, v); err != nil {
				return err
			}
		}
		o.Env = []string{"LD_LIBRARY_PATH=" + filepath.Join(*build, "lib")}
		if *nvmlLib == "" {
			*nvmlLib = filepath.Join(*build, "lib", "libnvidia-ml.so.1")
		}
	}
	for _, p := range []string{o.Cudaprobe, o.Library} {
		if _, err := os.Stat(p); err != nil {
			return &exitError{2, fmt.Errorf("%w (build: make -C hamicore OUT=%s; make -C fakegpu all tools-real OUT=%s)", err, *build, *build)}
		}
	}
	o.NVML = gpu.ProcessLister{Lib: gpu.NewLibrary(*nvmlLib)}
	err = drivertruth.Run(ctx, o)
	var m *drivertruth.Mismatch
	if errors.As(err, &m) {
		return &exitError{1, err}
	}
	if err != nil {
		return &exitError{2, err}
	}
	fmt.Fprintln(env.stdout, "bench drivertruth: the monitor's attribution matches the driver")
	return nil
}
