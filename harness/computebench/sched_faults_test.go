package computebench_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/computebench"
	"github.com/limitbed/limitbed/harness/computebench/sharetest"
	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/plugin/schedproto"
	"github.com/limitbed/limitbed/plugin/timeslice"
)

// A process that dies while its work runs under its container's slice (a benchmark killing its
// own worker, GPU-Virt-Bench's IS-LOAD-GEN; a crash) never reports that slice's drain. Its
// container's other processes go on at their share, alone on the GPU and beside a neighbour: the
// node learns the joiner is gone from the kernel (its lock on the report), not from the dead
// process. Before, a container alone on its GPU waited for that drain for ever.
func TestSchedulerSurvivesADeadJoiner(t *testing.T) {
	t.Parallel()
	r, _ := scheduled(t)
	sc := onGPUs("dead-joiner", computebench.ScenarioSeconds+2,
		scenario("alone", computebench.Container{Name: "c30", Policy: "force", Limit: 30, Procs: 2, Die: 3 * time.Second}),
		scenario("beside", computebench.Container{Name: "c30", Policy: "force", Limit: 30, Procs: 2, Die: 3 * time.Second},
			computebench.Container{Name: "c50", Policy: "force", Limit: 50}),
		scenario("burst-alone", computebench.Container{Name: "b30", Policy: "force", Limit: 30, Procs: 2, Workload: "burst",
			Die: 3 * time.Second}))
	sharetest.RequireShares(t, sharetest.Run(t, r, sc, sharetest.Tolerance))
}

// A tenant that puts something else in its scheduler report's place (a symlink, a directory, a
// short file) before its processes start: the node reads it as always busy, its processes obey
// their grant all the same. Before, the node left it out of the slices, its processes paced
// themselves beside them and the 50 % neighbour lost about 0.15 of the GPU.
func TestSchedulerReportPlanted(t *testing.T) {
	t.Parallel()
	r, _ := scheduled(t)
	var groups []computebench.Scenario
	for _, plant := range computebench.ReportPlants {
		groups = append(groups, scenario(plant,
			// Charged whole from each grant (its launchers' wake-up is its own loss) and a drain
			// it cannot report: under its 30 % or at it, never over (0.26–0.30 measured, 0.3002
			// at most): 0.275 ± the tolerance, whose top is its limit and the judge's resolution
			// of a 10 s window (0.005).
			computebench.Container{Name: "tenant", Policy: "force", Limit: 30, Report: plant, Want: 0.275},
			computebench.Container{Name: "neighbour", Policy: "force", Limit: 50}))
	}
	sharetest.RequireShares(t, sharetest.Run(t, r, onGPUs("report-planted", computebench.ScenarioSeconds, groups...), sharetest.Tolerance))
}

// Many processes in one container: 64 launching processes of a 30 % container beside a 50 %
// neighbour. Each process keeps its own queue bound, so a revoked slice drains 64 bounds of work
// beside the next slice: before, the tenant reached 0.40 and took 0.10 from the neighbour.
func TestSchedulerManyProcesses(t *testing.T) {
	// Not parallel: its bound is within a few tens of ms of the scheduler's and the launchers'
	// wake-ups, which the package's other scenarios, sharing a 2-core machine, delay (under them
	// it read 0.001–0.01 over it); run first, alone.
	r, _ := scheduled(t)
	sc := onGPUs("many-processes", computebench.ScenarioSeconds,
		scenario("64", computebench.Container{Name: "tenant", Policy: "force", Limit: 30, Procs: 64},
			computebench.Container{Name: "neighbour", Policy: "force", Limit: 50}))
	sharetest.RequireShares(t, sharetest.Run(t, r, sc, sharetest.Tolerance))
}

// Long kernels: a tenant whose kernels run 5 s each (one process; eight at once) beside a 70 %
// neighbour. A kernel once launched runs to its end, time-sliced with the neighbour's work; the
// scheduler charges the tenant for all of it and holds it until it has paid, and charges the
// neighbour only what it got, paying nothing back later. The bound (docs/attacks.md, "Compute"):
// the neighbour never under 1/(N+1) of the GPU in a 1 s window while N of the tenant's kernels run,
// never over its limit; the tenant at its limit over its cycles. Before: one process held the
// neighbour at 0.34 for 5 s and the overlap was paid back as a bonus (1.0 for 8 s); eight took
// 0.79 of the GPU for 47 s and, dropped after 10 s, went uncharged.
func TestSchedulerLongKernels(t *testing.T) {
	t.Parallel()
	r, _ := scheduled(t)
	sc := onGPUs("long-kernels", 40,
		scenario("one", computebench.Container{Name: "tenant", Policy: "force", Limit: 30, KernelUS: 5000000, Held: true},
			computebench.Container{Name: "neighbour", Policy: "force", Limit: 70}),
		scenario("eight", computebench.Container{Name: "tenant", Policy: "force", Limit: 30, KernelUS: 5000000, Procs: 8, Held: true},
			computebench.Container{Name: "neighbour", Policy: "force", Limit: 70}))
	res := sharetest.Run(t, r, sc, sharetest.Tolerance)
	floor := map[string]float64{"g0-neighbour": 0.5 - 0.10, "g1-neighbour": 1.0/9 - 0.03}
	// A 1 s window may hold, beside its share, the credit the neighbour saved while it waited
	// behind the kernel (half a quantum more: charge.go), spent when the kernel ends: 0.735–0.755
	// in that second. A bonus run (before: 1.0 for 8 s) is far above it.
	ceil := 0.70 + sharetest.Tolerance + 0.5*0.70*timeslice.DefaultConfig().Period.Seconds()
	for _, c := range res.Containers {
		w := c.Windows[computebench.SkipWindows:]
		switch c.Name {
		case "g0-neighbour", "g1-neighbour":
			for i, x := range w {
				if x < floor[c.Name] || x > ceil {
					t.Errorf("%s: second %d at %.3f, want %.2f..%.3f", c.Name, i+computebench.SkipWindows, x, floor[c.Name], ceil)
				}
			}
			for i, x := range c.Long {
				if x > 0.70+sharetest.Tolerance {
					t.Errorf("%s: 10 s window %d at %.3f, over its 0.70", c.Name, i, x)
				}
			}
		case "g0-tenant":
			// Its cycle: a 5 s kernel time-sliced over 10 s, then held 7 s until paid: 0.30
			// over its first two whole cycles (34 s).
			sum := 0.0
			for _, x := range c.Windows[:min(34, len(c.Windows))] {
				sum += x
			}
			if m := sum / 34; m > 0.30+sharetest.Tolerance || m < 0.30-sharetest.Tolerance {
				t.Errorf("%s: %.3f of the GPU over its first two cycles, want its 0.30", c.Name, m)
			}
		}
		t.Logf("%s: %v", c.Name, c.Windows)
	}
}

// The scheduler killed (SIGKILL: its grants left as they were, its beat stopped) and a new one
// started 3 s later: while it is away the libraries keep to their own slices (their limit's share
// of each period, by the wall clock) rather than NVML's pacing beside one another, so nobody runs
// over its limit, and the new one takes over where the grant files are. Before, the 30 % tenant
// reached 0.35.
func TestSchedulerKilledAndReplaced(t *testing.T) {
	t.Parallel()
	r, s := scheduled(t)
	bin, err := node.BuildBinary(context.Background(), cbuild.RepoRoot(), t.TempDir(), "vgpu-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	s.Binary = bin
	sc := onGPUs("killed", computebench.ScenarioSeconds+4, shares("uniform", 0, 30, 50), shares("mix", 0, 30, 50))
	go func() {
		time.Sleep(11 * time.Second) // baselines, then about 6 s into the scenario
		s.KillRestart(func() { time.Sleep(3 * time.Second) })
	}()
	res := sharetest.Run(t, r, sc, sharetest.Tolerance)
	for _, c := range res.Containers {
		limit := float64(c.Limit) / 100
		for i, w := range c.Long {
			if w > limit+sharetest.Tolerance {
				t.Errorf("%s: 10 s window %d at %.3f, over its %.2f", c.Name, i, w, limit)
			}
			if w < limit-0.10 {
				t.Errorf("%s: 10 s window %d at %.3f, far under its %.2f", c.Name, i, w, limit)
			}
		}
		t.Logf("%s: 10 s %v", c.Name, c.Long)
	}
}

// A container's grant file removed on the node mid-run (an operator's slip, a cleaner): its running
// processes still hold the file they mapped; the node goes on driving them through it, and puts the
// file back in its place for the processes the container starts later. Before, the container was
// dropped (its entries set Off), its library paced itself beside the neighbour's slices and the
// 50 % neighbour lost 0.11.
func TestSchedulerGrantFileRemoved(t *testing.T) {
	t.Parallel()
	r, _ := scheduled(t)
	sc := onGPUs("grant-removed", computebench.ScenarioSeconds+2,
		scenario("removed", computebench.Container{Name: "tenant", Policy: "force", Limit: 30},
			computebench.Container{Name: "neighbour", Policy: "force", Limit: 50}))
	go func() {
		time.Sleep(12 * time.Second) // baselines, then about 6 s into the scenario
		grants, _ := filepath.Glob(filepath.Join(r.Dir, "shared*", "vgpu", "sched", "g0-tenant_main"+schedproto.GrantSuffix))
		for _, g := range grants {
			if err := os.Remove(g); err != nil {
				t.Errorf("remove %s: %v", g, err)
			}
		}
		if len(grants) == 0 {
			t.Errorf("no grant file of g0-tenant under %s", r.Dir)
		}
	}()
	sharetest.RequireShares(t, sharetest.Run(t, r, sc, sharetest.Tolerance))
}

// default, as the isolation design defines it: held to its limit while a neighbour of the same or a
// higher priority runs kernels, full speed otherwise — a neighbour that stops mid-run frees it
// within a period, one that starts again holds it within a period of its first launch. 1 s
// windows of a default 30 % container beside a force 50 % one that stops at 7 s and another that
// starts at 12 s (second 12 holds its process's start). Before (a neighbour busy for 0.5 s after
// its last launch), second 7 read 0.565.
func TestSchedulerDefaultFollowsItsNeighbour(t *testing.T) {
	// Not parallel: its bound is within a few tens of ms of the scheduler's and the launchers'
	// wake-ups, which the package's other scenarios, sharing a 2-core machine, delay (under them
	// it read 0.001–0.01 over it); run first, alone.
	r, _ := scheduled(t)
	sc := scenario("default-neighbour",
		computebench.Container{Name: "d30", Policy: "default", Limit: 30, Priority: 1},
		computebench.Container{Name: "n1", Policy: "force", Limit: 50, Priority: 1, Stop: 7 * time.Second},
		computebench.Container{Name: "n2", Policy: "force", Limit: 50, Priority: 1, Start: 12 * time.Second})
	sc.Seconds = 20
	res := sharetest.Run(t, r, sc, sharetest.Tolerance)
	var d []float64
	for _, c := range res.Containers {
		if c.Name == "d30" {
			d = c.Windows
		}
	}
	if len(d) < 20 {
		t.Fatalf("d30: %d windows, want 20: %v", len(d), d)
	}
	for i, w := range d {
		switch {
		case i >= 2 && i <= 6, i >= 13:
			if w < 0.25 || w > 0.37 {
				t.Errorf("d30: second %d (a neighbour runs): %.3f, want its 0.30", i, w)
			}
		case i == 7:
			// The neighbour's process starts a little after the scenario and stops launching 7 s
			// after its own start: a period after its last kernel, this one runs free.
			if w < 0.75 {
				t.Errorf("d30: second 7 (alone from a little after 7 s): %.3f, want free within a period", w)
			}
		case i >= 8 && i <= 11:
			if w < 0.95 {
				t.Errorf("d30: second %d (alone): %.3f, want full speed", i, w)
			}
		}
	}
	t.Logf("d30 per second: %v", d)
}
