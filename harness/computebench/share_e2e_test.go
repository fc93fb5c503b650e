package computebench_test

import (
	"math"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/computebench"
	"github.com/limitbed/limitbed/harness/computebench/sharetest"
)

// The bench end to end on fakegpu, judged by the device's record of completed work: two
// unthrottled containers on GPU 0 with 1 ms and 10 ms kernels get half each (time slices, not
// kernel sizes, decide), the second started 1 s later; a third alone on GPU 1 gets all of it. No
// library: this is the time-slicing the limits are built on, and the judge's arithmetic.
func TestSharedBenchOnFakegpu(t *testing.T) {
	t.Parallel()
	r := sharetest.Runner(t)
	r.BaselineSeconds = 3
	sc := computebench.Scenario{Name: "time-slicing", Profile: "2x-a16-16q", Seconds: 8, Containers: []computebench.Container{
		{Name: "short", Policy: "none", Workload: "uniform", KernelUS: 1000, Procs: 1, Want: 0.5},
		{Name: "long", Policy: "none", Workload: "uniform", KernelUS: 10000, Procs: 1, Start: time.Second, Want: 0.5},
		{Name: "alone", GPU: 1, Policy: "none", Workload: "uniform", KernelUS: 1000, Procs: 1, Want: 1},
	}}
	res := sharetest.Run(t, r, sc, sharetest.Tolerance)
	sharetest.RequireShares(t, res)
	for _, c := range res.Containers {
		if c.Unthrottled < 0.97 || c.Unthrottled > 1.03 {
			t.Errorf("%s: unthrottled rate %.3f, want about 1 (a spin kernel keeps the engine busy)", c.Name, c.Unthrottled)
		}
		if c.Kernels == 0 || len(c.Windows) < 6 {
			t.Errorf("%s: %d kernels, windows %v", c.Name, c.Kernels, c.Windows)
		}
	}
	if w := res.Containers[0].Windows; len(w) > 0 && math.Abs(w[0]-1) > 0.1 {
		t.Errorf("short alone in its first second: share %.3f, want about 1", w[0])
	}
	for _, g := range res.GPUs {
		for i, b := range g.Busy[1:] {
			if b < 0.97 {
				t.Errorf("GPU %d busy %.3f in second %d, want the whole engine", g.GPU, b, i+1)
			}
		}
	}
}
