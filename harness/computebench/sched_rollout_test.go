package computebench_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/computebench"
	"github.com/limitbed/limitbed/harness/computebench/sharetest"
	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/plugin/schedproto"
	"github.com/limitbed/limitbed/plugin/timeslice"
)

// The bounds of a handover: a 1 s window below starvedShare of the GPU is a container starved,
// and one period (plus two readings of the records) is the longest a container may do no work.
const (
	starvedShare = 0.05
	rolloutTick  = 10 * time.Millisecond
)

// The chart's DaemonSet rolls with maxSurge 0 and maxUnavailable 1 (docs/plugin.md, "One
// scheduler per node"): on each node the old pod's vgpu-scheduler gets SIGTERM and exits, setting
// every entry Off (the libraries pace themselves), and the new pod's starts a moment later (1 s:
// a pod replaced on a loaded node). Before that, a second scheduler started while the first runs
// (a surge pod) exits at once with status 1 naming the first, and sets no entry Off. Judged on
// 30 % + 50 % (the uniform kernel, the mix) across both, by fakegpu's completed work: no 10 s
// window over the limit + the tolerance, no 1 s window after the first 2 s below 0.05 of the GPU,
// no stall longer than a period; and the new scheduler drives every entry afterwards.
func TestSchedulerRollout(t *testing.T) {
	// Not parallel: its bound (no container starved beyond a period, read every 10 ms) is within
	// tens of ms of the schedulers' and launchers' wake-ups, which the package's other scenarios,
	// sharing a 2-core machine, delay (130–140 ms stalls under them); run first, alone.
	r, s := scheduled(t)
	bin, err := node.BuildBinary(context.Background(), cbuild.RepoRoot(), t.TempDir(), "vgpu-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	s.Binary = bin
	r.Tick = rolloutTick
	started := make(chan time.Time, 1)
	var once sync.Once
	prepare := r.Prepare
	r.Prepare = func(ctx context.Context, c computebench.Container, dir string, cmd *exec.Cmd) error {
		if c.Policy != "none" { // the scenario's first container, not a baseline
			once.Do(func() { started <- time.Now() })
		}
		return prepare(ctx, c, dir, cmd)
	}
	sc := onGPUs("rollout", 30, shares("uniform", 0, 30, 50), shares("mix", 0, 30, 50))
	var (
		wg        sync.WaitGroup
		surplus   []computebench.Surplus
		handovers []computebench.Handover
		after     map[string]schedproto.GrantEntry
		errs      []error
		at        [3]time.Duration // the surplus's start, the rollout's start and end, from the scenario's
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t0 := <-started
		time.Sleep(time.Until(t0.Add(6 * time.Second)))
		at[0] = time.Since(t0)
		var err error
		surplus, err = s.Second(2*time.Second, 300*time.Millisecond)
		errs = append(errs, err)
		time.Sleep(time.Until(t0.Add(12 * time.Second)))
		at[1] = time.Since(t0)
		handovers, err = s.Rollout(time.Second)
		at[2] = time.Since(t0)
		errs = append(errs, err)
		time.Sleep(3 * time.Second) // its scan, its calibration
		after, err = s.GrantStates()
		errs = append(errs, err)
	}()
	res := sharetest.Run(t, r, sc, sharetest.Tolerance)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("second scheduler at %.1f s; rollout from %.1f s to %.1f s of the scenario", at[0].Seconds(), at[1].Seconds(), at[2].Seconds())
	checkSurplus(t, surplus)
	checkHandovers(t, handovers, after)
	period := timeslice.DefaultConfig().Period
	for _, c := range res.Containers {
		hi := float64(c.Limit)/100 + sharetest.Tolerance
		for i, w := range c.Long {
			if w > hi {
				t.Errorf("%s: 10 s window from %d s did %.3f of the GPU, over its %d %% (+%.2f)", c.Name, i+2, w, c.Limit, sharetest.Tolerance)
			}
		}
		for i, w := range c.Windows[computebench.SkipWindows:] {
			if w >= 0 && w < starvedShare {
				t.Errorf("%s: second %d did %.3f of the GPU: starved", c.Name, i+computebench.SkipWindows, w)
			}
		}
		if c.LongestStall > period+2*rolloutTick {
			t.Errorf("%s: did no work for %v from %v of its run, want at most a period (%v, +2 readings)", c.Name,
				c.LongestStall.Round(time.Millisecond), c.LongestStallAt.Round(time.Millisecond), period)
		}
	}
}

func checkSurplus(t *testing.T, surplus []computebench.Surplus) {
	t.Helper()
	if len(surplus) != 1 {
		t.Fatalf("%d second schedulers started, want 1", len(surplus))
	}
	for _, sp := range surplus {
		t.Logf("second scheduler on %s: exit %d after %v: %s", sp.Hook, sp.Exit, sp.Took.Round(time.Millisecond), sp.Stderr)
		if sp.Exit != 1 || sp.Took > time.Second {
			t.Errorf("a second scheduler beside the first (pid %d) ended with %d after %v, want 1 at once", sp.FirstPID, sp.Exit, sp.Took)
		}
		if want := fmt.Sprintf("pid %d", sp.FirstPID); !strings.Contains(sp.Stderr, "another vgpu-scheduler drives") || !strings.Contains(sp.Stderr, want) {
			t.Errorf("the second scheduler's error does not name the first (%s): %q", want, sp.Stderr)
		}
		if !strings.Contains(sp.Holder, fmt.Sprintf("pid %d,", sp.FirstPID)) {
			t.Errorf("the lock file names %q after the second scheduler, want the first (pid %d)", sp.Holder, sp.FirstPID)
		}
		if len(sp.Off) > 0 {
			t.Errorf("entries set Off while the second scheduler ran: %v", sp.Off)
		}
	}
}

func checkHandovers(t *testing.T, handovers []computebench.Handover, after map[string]schedproto.GrantEntry) {
	t.Helper()
	if len(handovers) != 1 {
		t.Fatalf("%d handovers, want 1", len(handovers))
	}
	for _, h := range handovers {
		t.Logf("handover on %s: pid %d stopped in %v (%v), pid %d started %v after", h.Hook, h.OldPID,
			h.Stop.Round(time.Millisecond), h.OldExit, h.NewPID, h.Gap.Round(time.Millisecond))
		if h.OldExit != nil {
			t.Errorf("the old scheduler (pid %d) ended with %v on SIGTERM, want status 0", h.OldPID, h.OldExit)
		}
	}
	if len(after) != 4 {
		t.Errorf("%d grant entries after the rollout, want 4: %v", len(after), after)
	}
	for key, e := range after {
		if e.State == schedproto.Off || !e.Counting() {
			t.Errorf("after the rollout %s reads %s (beat %d, allowed stamped at %d): the new scheduler does not drive it", key, e.State, e.Beat, e.AllowedBeat)
		}
	}
}
