// Package sharetest runs shared-GPU scenarios (computebench.Scenario) in Go tests and asserts
// what the compute limit's specification says of them: every judged container within its band in
// every 10 s window after its first 2 s, judged by fakegpu's record of its completed work.
//
//	r := sharetest.Runner(t)
//	res := sharetest.Run(t, r, computebench.ForceShares("mix", time.Second, 30, 50), sharetest.Tolerance)
//	sharetest.RequireShares(t, res)
//
// A package of its own so that the limitbed CLI, which runs the same scenarios, links no test
// framework.
package sharetest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/harness/computebench"
	"github.com/limitbed/limitbed/internal/cbuild"
)

// Tolerance is the bound of the specification on fakegpu: ± 0.03 of the limit. It is the same
// under CI=true: a run that misses it on a loaded machine has missed it.
const Tolerance = 0.03

// Runner is a SharedRunner on this repository's C build (built first), with its scratch in the
// test's temporary directory. Set Prepare or Env on it to give containers more.
func Runner(t testing.TB) *computebench.SharedRunner {
	t.Helper()
	p := cbuild.Build(t)
	r := &computebench.SharedRunner{
		Probe: filepath.Join(p.Bin, "hamicore-launchprobe"), Preload: filepath.Join(p.Lib, "libvgpu.so"),
		Work: filepath.Join(p.Bin, "gpuwork"), Lib: p.Lib, ProfileDir: filepath.Join(p.Root, "fakegpu", "profiles"),
		Dir: t.TempDir(), Logger: klog.Background().V(4),
	}
	if v := os.Getenv("ASAN_OPTIONS"); v != "" {
		r.Env = append(r.Env, "ASAN_OPTIONS="+v)
	}
	return r
}

// Run runs the scenario, fails the test if it could not run, and logs the report (every 1 s
// share included).
func Run(t testing.TB, r *computebench.SharedRunner, sc computebench.Scenario, tol float64) *computebench.Result {
	t.Helper()
	res, err := r.Run(context.Background(), sc, tol)
	if err != nil {
		t.Fatalf("scenario %s: %v", sc.Name, err)
	}
	t.Log("\n" + Report(res))
	return res
}

// RequireShares fails the test for every judged container outside its band in any 10 s window
// after its first 2 s (or with no such window), naming the container and its windows.
func RequireShares(t testing.TB, res *computebench.Result) {
	t.Helper()
	for _, c := range res.Containers {
		if c.Judged && !c.OK {
			t.Errorf("scenario %s: container %s (%s %d%%, %s, start %s): 10 s windows %v, want %.2f..%.2f; 1 s windows %v",
				res.Scenario, c.Name, c.Policy, c.Limit, c.Workload, c.Start, c.Long, c.Lo, c.Hi, c.Windows)
		}
	}
}

// Report is the scenario's table with every 1 s window.
func Report(res *computebench.Result) string {
	var b strings.Builder
	computebench.ReportShared(&b, res, true)
	return b.String()
}
