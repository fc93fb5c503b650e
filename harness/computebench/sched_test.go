package computebench_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/harness/computebench"
	"github.com/limitbed/limitbed/harness/computebench/sharetest"
	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/harness/sandbox/sandboxtest"
	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/plugin/timeslice"
)

// The compute limit's specification on fakegpu with the node's scheduler (issue 21, "Must show"),
// judged by fakegpu's record of each container's completed work: every container within ±0.03
// of its share in every 10 s window after its first 2 s. Every test needs root (each container's
// processes run in a private mount namespace with its grant file at the compiled-in path): it is
// skipped without, except under CI=true. Scenarios of one test run at once on the GPUs of one
// fakegpu host (8x-h100-80g), each on a GPU of its own, so the file adds about a minute.

// scheduled is a runner whose containers run as on a node with vgpu-scheduler.
func scheduled(t *testing.T) (*computebench.SharedRunner, *computebench.Scheduled) {
	t.Helper()
	sandboxtest.Host(t)
	r := sharetest.Runner(t)
	r.BaselineSeconds = 3 // spin kernels: the unthrottled rate is 1.000 on fakegpu
	s := &computebench.Scheduled{Privatens: filepath.Join(cbuild.RepoRoot(), "hamicore", "test", "privatens"),
		Logger: klog.Background().V(2)}
	r.Prepare = s.Prepare
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return r, s
}

// onGPUs runs each scenario on a GPU of its own of one 8-GPU fakegpu host, at once.
func onGPUs(name string, seconds float64, groups ...computebench.Scenario) computebench.Scenario {
	sc := computebench.Scenario{Name: name, Profile: "8x-h100-80g", Seconds: seconds}
	for g, grp := range groups {
		for _, c := range grp.Containers {
			c.GPU = g
			c.Name = fmt.Sprintf("g%d-%s", g, c.Name)
			sc.Containers = append(sc.Containers, c)
		}
	}
	return sc
}

func shares(workload string, stagger time.Duration, limits ...int) computebench.Scenario {
	return computebench.ForceShares(workload, stagger, limits...)
}

// 30 % + 50 %, 10 % + 90 % and 25 % + 25 % + 50 % under force, each with a uniform kernel, the
// shape mix and graph replays, started together.
func TestSchedulerForceShares(t *testing.T) {
	t.Parallel()
	r, _ := scheduled(t)
	sc := onGPUs("force-together", computebench.ScenarioSeconds,
		shares("uniform", 0, 30, 50), shares("mix", 0, 30, 50), shares("graph", 0, 30, 50),
		shares("uniform", 0, 10, 90), shares("mix", 0, 10, 90), shares("graph", 0, 10, 90),
		shares("uniform", 0, 25, 25, 50), shares("mix", 0, 25, 25, 50))
	sharetest.RequireShares(t, sharetest.Run(t, r, sc, sharetest.Tolerance))
}

// The same started 1 s apart (a container arriving beside running ones), and the trio of graphs.
func TestSchedulerForceSharesStaggered(t *testing.T) {
	t.Parallel()
	r, _ := scheduled(t)
	sc := onGPUs("force-1s-apart", computebench.ScenarioSeconds+2,
		shares("uniform", time.Second, 30, 50), shares("mix", time.Second, 30, 50), shares("graph", time.Second, 30, 50),
		shares("uniform", time.Second, 10, 90), shares("mix", time.Second, 10, 90), shares("graph", time.Second, 10, 90),
		shares("mix", time.Second, 25, 25, 50), shares("graph", 0, 25, 25, 50))
	sharetest.RequireShares(t, sharetest.Run(t, r, sc, sharetest.Tolerance))
}

func scenario(name string, cs ...computebench.Container) computebench.Scenario {
	for i := range cs {
		if cs[i].KernelUS == 0 {
			cs[i].KernelUS = 1000
		}
		if cs[i].Burst == 0 {
			cs[i].Burst = 4
		}
		if cs[i].Procs == 0 {
			cs[i].Procs = 1
		}
		if cs[i].Workload == "" {
			cs[i].Workload = "uniform"
		}
	}
	return computebench.Scenario{Name: name, Containers: cs}
}

// The policies and priorities; kernels longer than a period; a loop of short bursts each
// followed by a synchronisation (latency-bound inference), alone and beside a busy neighbour.
func TestSchedulerPolicies(t *testing.T) {
	t.Parallel()
	r, _ := scheduled(t)
	sc := onGPUs("policies", computebench.ScenarioSeconds+2,
		scenario("default-alone", computebench.Container{Name: "alone", Policy: "default", Limit: 30, Workload: "mix", Min: 0.95}),
		scenario("default-pair", computebench.Container{Name: "d30", Policy: "default", Limit: 30, Want: 0.30},
			computebench.Container{Name: "d50", Policy: "default", Limit: 50, Want: 0.50}),
		// CUDA_TASK_PRIORITY 0 is higher than 1: the higher one is not held to its 20 %, it gets
		// what the lower one's 30 % leave.
		scenario("priority", computebench.Container{Name: "hi", Policy: "default", Limit: 20, Priority: 0, Want: 0.70},
			computebench.Container{Name: "lo", Policy: "default", Limit: 30, Priority: 1, Want: 0.30}),
		scenario("long-kernels", computebench.Container{Name: "long", Policy: "force", Limit: 30, KernelUS: 1000000}),
		scenario("burst-alone", computebench.Container{Name: "burst", Policy: "force", Limit: 30, Workload: "burst"}),
		scenario("burst-beside", computebench.Container{Name: "burst", Policy: "force", Limit: 30, Workload: "burst"},
			computebench.Container{Name: "busy", Policy: "force", Limit: 50}),
		scenario("never-held", computebench.Container{Name: "dis", Policy: "disable", Limit: 30, Min: 0.95}),
		scenario("limit-100", computebench.Container{Name: "full", Policy: "force", Limit: 100, Min: 0.95}))
	sharetest.RequireShares(t, sharetest.Run(t, r, sc, sharetest.Tolerance))
}

// Sixteen containers whose limits sum to 100 % on one GPU each hold theirs.
func TestSchedulerSixteen(t *testing.T) {
	t.Parallel()
	r, _ := scheduled(t)
	sharetest.RequireShares(t, sharetest.Run(t, r, computebench.Scenarios()["force-16-sum-100"], sharetest.Tolerance))
}

// No container that is owed a slice waits longer than a period for it, whatever its neighbours
// do: a 10 % container of the lowest priority beside one running 1 s kernels, beside one without
// the library (it launches what it likes: the GPU time-slices it with the holder) and beside
// higher-priority ones (the scheduler's record of every wait after a container's first 2 s).
func TestSchedulerNoStarvation(t *testing.T) {
	t.Parallel()
	r, s := scheduled(t)
	sc := onGPUs("no-starvation", computebench.ScenarioSeconds,
		scenario("beside-long", computebench.Container{Name: "small", Policy: "force", Limit: 10, Priority: 9},
			computebench.Container{Name: "long", Policy: "force", Limit: 50, KernelUS: 1000000}),
		scenario("beside-higher", computebench.Container{Name: "small", Policy: "force", Limit: 10, Priority: 9},
			computebench.Container{Name: "h1", Policy: "force", Limit: 30, Priority: 0},
			computebench.Container{Name: "h2", Policy: "force", Limit: 30, Priority: 0},
			computebench.Container{Name: "h3", Policy: "default", Limit: 10, Priority: 0}),
		scenario("beside-rogue", computebench.Container{Name: "small", Policy: "force", Limit: 10, Priority: 9},
			computebench.Container{Name: "rogue", Policy: "none"}))
	res := sharetest.Run(t, r, sc, sharetest.Tolerance)
	period := timeslice.DefaultConfig().Period
	for _, g := range s.Stats() {
		for gpu, rep := range g {
			for key, st := range rep.Seats {
				if st.MaxWait > period {
					t.Errorf("GPU %s: container %s waited %v for a slice it was owed, want at most %v", gpu, key, st.MaxWait, period)
				}
				if st.Slices == 0 {
					t.Errorf("GPU %s: container %s got no slice", gpu, key)
				}
			}
		}
	}
	for _, c := range res.Containers {
		if strings.HasSuffix(c.Name, "small") {
			for i, w := range c.Windows[2:] {
				if w < 0.02 {
					t.Errorf("%s: second %d did %.3f of its rate: starved", c.Name, i+2, w)
				}
			}
		}
	}
}

// A scheduler that restarts mid-run (its DaemonSet's pod replaced) neither stalls a container nor
// lets one run over its share: every 10 s window holds.
func TestSchedulerRestart(t *testing.T) {
	t.Parallel()
	r, s := scheduled(t)
	sc := onGPUs("restart", computebench.ScenarioSeconds+2, shares("uniform", 0, 30, 50), shares("mix", 0, 30, 50))
	go func() {
		time.Sleep(12 * time.Second) // baselines, then 7 s into the scenario
		s.Restart(func() { time.Sleep(200 * time.Millisecond) })
	}()
	res := sharetest.Run(t, r, sc, sharetest.Tolerance)
	sharetest.RequireShares(t, res)
	for _, c := range res.Containers {
		for i, w := range c.Windows[2:] {
			if w >= 0 && w < 0.05 {
				t.Errorf("%s: second %d did %.3f of its rate: stalled", c.Name, i+2, w)
			}
		}
	}
}

// On a power-capped GPU each container holds its share of the work, not of the time:
// vgpu-scheduler, as a process with the node's fakegpu, reads each GPU's SM clock and name through
// NVML and charges slices by the clock's gain over full load, as far as it is work on that card
// (plugin/timeslice/cards.go). The H100 as fakegpu's h100-80g models it (the clock 13 % over full
// load while partly idle, 0.3 of that work): charged the whole clock gain, 30 % + 50 % did
// 0.276 / 0.460 here and 0.270 / 0.460 on the card. The H200 (h200-141g: +30 %, 0.61 of it work):
// 30 + 50 alone on its GPU.
func TestSchedulerHoldsWorkOnAPowerCappedGPU(t *testing.T) {
	t.Parallel()
	bin, err := node.BuildBinary(context.Background(), cbuild.RepoRoot(), t.TempDir(), "vgpu-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("h100", func(t *testing.T) {
		t.Parallel()
		r, s := scheduled(t)
		s.Binary = bin
		// 8x-h100-80g's GPUs are H100s: the engine as h100-80g models one.
		r.Env = append(r.Env, "FAKEGPU_POWER_BOOST=113", "FAKEGPU_POWER_WORK_PCT=30")
		sc := onGPUs("power-capped-h100", computebench.ScenarioSeconds+2,
			shares("uniform", 0, 30, 50), shares("mix", time.Second, 30, 50), shares("uniform", 0, 20, 30, 40),
			shares("uniform", 0, 10, 90), shares("uniform", 0, 30))
		sharetest.RequireShares(t, sharetest.Run(t, r, sc, sharetest.Tolerance))
	})
	t.Run("h200", func(t *testing.T) {
		t.Parallel()
		r, s := scheduled(t)
		s.Binary = bin
		sc := shares("uniform", 0, 30, 50)
		sc.Name, sc.Profile, sc.Seconds = "power-capped-h200", "h200-141g", computebench.ScenarioSeconds+2
		sharetest.RequireShares(t, sharetest.Run(t, r, sc, sharetest.Tolerance))
	})
}
