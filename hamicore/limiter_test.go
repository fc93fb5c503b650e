// Compute limit (CUDA_DEVICE_SM_LIMIT + GPU_CORE_UTILIZATION_POLICY) on fakegpu: launchprobe
// launches back to back and reports the busy fraction overall and per 1 s window (fakegpu charges
// each kernel its simulated duration, so the fraction is exact). The steady figure is the mean of
// the windows after the first 2 s, as the limit is specified. Ratios over seconds, no tight timing.
package hamicore_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/computebench"
	"github.com/limitbed/limitbed/harness/gpuwork"
)

// launchResult is launchprobe's JSON line, as computebench (its one reader) decodes it.
type launchResult = computebench.ProbeResult

// steady is the mean busy fraction of the 1 s windows after the first 2 s (-1 without one).
func steady(r launchResult) float64 {
	if len(r.Windows) <= computebench.SkipWindows {
		return -1
	}
	return computebench.Steady(r.Windows)
}

// Tolerance of the limiter on a steady workload: docs/hamicore.md, everywhere, CI included. A
// machine running other busy tests on 2 cores can starve a probe of CPU (a late launch shows as
// a dip the limit did not make): runJudged measures a bound missed in such a run again.
func tolerance() float64 { return 0.03 }

// attempts: how often runJudged measures a batch whose bounds were missed in starved runs.
const attempts = 3

// miss is a bound missed by the jobs at these indices (two processes held to one limit together).
type miss struct {
	jobs []int
	msg  string
}

// waits are the CPU waits of the runs m concerns, for its message.
func (m miss) waits(rs []launchResult) [][]float64 {
	var w [][]float64
	for _, j := range m.jobs {
		w = append(w, rs[j].Waits)
	}
	return w
}

// runJudged runs the jobs mk makes (all at once, fresh pods each time) and judges their results.
// A miss in a run the machine starved of CPU (computebench.Starved: a judged window in which the
// probe waited for a CPU for the tolerance's worth of it) is measured again with a fresh batch, up
// to attempts times; a miss in a run it did not starve fails at once, as does the last attempt's.
func runJudged(t *testing.T, mk func() []job, judge func(rs []launchResult) []miss) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		rs := runAll(t, mk())
		misses := judge(rs)
		starved := len(misses) > 0
		for _, m := range misses {
			hit := false
			for _, j := range m.jobs {
				hit = hit || computebench.Starved(rs[j].Waits, tolerance())
			}
			starved = starved && hit
		}
		if starved && attempt < attempts {
			for _, m := range misses {
				t.Logf("attempt %d, starved of CPU (waits %v), measuring again: %s", attempt, m.waits(rs), m.msg)
			}
			continue
		}
		for _, m := range misses {
			t.Errorf("%s (attempt %d; CPU waits per window %v)", m.msg, attempt, m.waits(rs))
		}
		return
	}
}

// Band for the short runs of every launch path, judged after 2 s.
const limitLow, limitHigh = 0.20, 0.40

const spin1ms = "--kernel-us=1000"

// The limit holds for a uniform kernel, for a mix of shapes and durations whose grid sizes say
// nothing about their time, and for graph replays; disable, 0 and 100 do not throttle.
func TestComputeLimit(t *testing.T) {
	tol := tolerance()
	force := "GPU_CORE_UTILIZATION_POLICY=force"
	checkSteady(t, "busy", []steadyCase{
		{"uniform 30 force", []string{"CUDA_DEVICE_SM_LIMIT=30", force}, []string{spin1ms}, 0.30 - tol, 0.30 + tol, false},
		{"mix 30 force", []string{"CUDA_DEVICE_SM_LIMIT=30", force}, []string{"--workload=mix"}, 0.30 - tol, 0.30 + tol, false},
		{"mix 60 force", []string{"CUDA_DEVICE_SM_LIMIT=60", force}, []string{"--workload=mix"}, 0.60 - tol, 0.60 + tol, false},
		// Graph replays: the executable graph's kernel nodes, counted at instantiation, charged per cuGraphLaunch.
		{"graph 30 force", []string{"CUDA_DEVICE_SM_LIMIT=30", force}, []string{"--workload=graph"}, 0.30 - tol, 0.30 + tol, false},
		{"graph 60 force ptsz", []string{"CUDA_DEVICE_SM_LIMIT=60", force}, []string{"--workload=graph", "--ptsz"}, 0.60 - tol, 0.60 + tol, false},
		// Without a monitor the region's switch stays as stamped (on): default limits, as upstream.
		{"uniform 30 default, no monitor", []string{"CUDA_DEVICE_SM_LIMIT=30"}, []string{spin1ms}, 0.30 - tol, 0.30 + tol, false},
		{"mix 30 disable", []string{"CUDA_DEVICE_SM_LIMIT=30", "GPU_CORE_UTILIZATION_POLICY=disable"}, []string{"--workload=mix"}, 0.95, 1.1, false},
		{"uniform 100 force", []string{"CUDA_DEVICE_SM_LIMIT=100", force}, []string{spin1ms}, 0.95, 1.1, false},
		{"uniform 0 force", []string{"CUDA_DEVICE_SM_LIMIT=0", force}, []string{spin1ms}, 0.95, 1.1, false},
	})
}

// steadyCase is one 8 s launchprobe run judged on its mean after 2 s; plain runs it without the
// library.
type steadyCase struct {
	name   string
	env    []string
	args   []string
	lo, hi float64
	plain  bool
}

// checkSteady runs every case at once, each in its own pod on its own GPU (the first process
// stamps the region's limits), and judges each; what names the figure in a failure.
func checkSteady(t *testing.T, what string, cases []steadyCase) {
	t.Helper()
	mk := func() []job {
		jobs := make([]job, len(cases))
		for i, c := range cases {
			e := newEnv(t)
			environ := e.limited(c.env...)
			if c.plain {
				environ = append(append([]string{}, e.base...), c.env...)
			}
			jobs[i] = job{e: e, environ: environ, args: append([]string{"--seconds", "8"}, c.args...)}
		}
		return jobs
	}
	runJudged(t, mk, func(rs []launchResult) []miss {
		var ms []miss
		for i, c := range cases {
			got := steady(rs[i])
			t.Logf("%s: %s %.3f after 2 s (want %.2f..%.2f)", c.name, what, got, c.lo, c.hi) // the figures, passing too (-v)
			if got < c.lo || got > c.hi {
				ms = append(ms, miss{[]int{i}, fmt.Sprintf("%s: %s %.3f after 2 s (windows %v), want %.2f..%.2f", c.name, what, got, rs[i].Windows, c.lo, c.hi)})
			}
		}
		return ms
	})
}

// job is one launchprobe run; runAll runs them all at once (they sleep while throttled, so a
// batch takes as long as one run) and returns their results in order.
type job struct {
	e       *env
	environ []string
	args    []string
	after   time.Duration // started this long after the previous job
}

func runAll(t *testing.T, jobs []job) []launchResult {
	t.Helper()
	outs := make([]bytes.Buffer, len(jobs))
	errs := make([]bytes.Buffer, len(jobs))
	procs := make([]*exec.Cmd, len(jobs))
	for i, j := range jobs {
		time.Sleep(j.after)
		procs[i] = j.e.cmd(j.environ, "hamicore-launchprobe", j.args...)
		procs[i].Stdout, procs[i].Stderr = &outs[i], &errs[i]
		if err := procs[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	rs := make([]launchResult, len(procs))
	failed := false
	for i, p := range procs {
		err := p.Wait()
		if err == nil {
			rs[i], err = computebench.ParseProbe(outs[i].Bytes())
		}
		if err == nil && (rs[i].LaunchError != 0 || rs[i].SyncError != 0 || rs[i].Launches == 0) {
			err = fmt.Errorf("launch errors")
		}
		if err != nil {
			t.Errorf("launchprobe %v: %v\nstdout: %s\nstderr: %s", jobs[i].args, err, outs[i].String(), errs[i].String())
			failed = true
		}
	}
	if failed {
		t.FailNow()
	}
	return rs
}

// Every launch entry point is throttled, through the symbol and through cuGetProcAddress
// (per-thread variants too), and charged once.
func TestComputeLimitEveryLaunchPath(t *testing.T) {
	const ms = "FAKEGPU_LAUNCH_NS=1000000"
	cases := [][]string{
		{"--api=kernel"}, {"--api=kernel", "--ptsz"}, {"--api=ex"}, {"--api=ex", "--ptsz", "--blocks=4"},
		{"--api=coop"}, {"--api=coop", "--ptsz"}, {"--api=multi"}, {"--api=legacy"},
	}
	jobs := make([]job, len(cases))
	for i, args := range cases {
		e := newEnv(t)
		jobs[i] = job{e: e, environ: e.limited(ms, "CUDA_DEVICE_SM_LIMIT=30", "GPU_CORE_UTILIZATION_POLICY=FORCE"), args: append([]string{"--seconds", "5"}, args...)}
	}
	for i, r := range runAll(t, jobs) {
		// After 2 s: the first 1.5 s are the calibration's unthrottled run.
		if got := steady(r); got < limitLow || got > limitHigh {
			t.Errorf("%v: busy %.3f after 2 s (%d launches, windows %v), want %.2f..%.2f", cases[i], got, r.Launches, r.Windows, limitLow, limitHigh)
		}
	}
}

// On a power-capped GPU a share of the time buys more work than the same share of a full-load
// run (FAKEGPU_POWER_BOOST=125: a lightly loaded device runs kernels 1.25 times faster, as an
// H200's GEMMs at 1980 instead of 1500 MHz). The limit is a share of the work: a limiter holding
// 30 % of the time gives 0.375 here. launchprobe counts nominal work, the full-load figure.
func TestComputeLimitIsWorkNotTime(t *testing.T) {
	tol := tolerance()
	boost, force := "FAKEGPU_POWER_BOOST=125", "GPU_CORE_UTILIZATION_POLICY=force"
	checkSteady(t, "work of full load", []steadyCase{
		{"unlimited", []string{boost}, []string{spin1ms}, 0.97, 1.03, true},
		{"uniform 30 force", []string{boost, "CUDA_DEVICE_SM_LIMIT=30", force}, []string{spin1ms}, 0.30 - tol, 0.30 + tol, false},
		{"mix 60 force", []string{boost, "CUDA_DEVICE_SM_LIMIT=60", force}, []string{"--workload=mix"}, 0.60 - tol, 0.60 + tol, false},
		{"graph 30 force", []string{boost, "CUDA_DEVICE_SM_LIMIT=30", force}, []string{"--workload=graph"}, 0.30 - tol, 0.30 + tol, false},
	})
}

// The limit is the container's: two processes of one pod share 30 %, they do not get 30 % each.
func TestComputeLimitIsPerContainer(t *testing.T) {
	t.Parallel()
	mk := func() []job {
		e := newEnv(t)
		environ := e.limited("CUDA_DEVICE_SM_LIMIT=30", "GPU_CORE_UTILIZATION_POLICY=force")
		args := []string{"--seconds", "8", spin1ms}
		return []job{{e: e, environ: environ, args: args}, {e: e, environ: environ, args: args}}
	}
	runJudged(t, mk, func(rs []launchResult) []miss {
		sum := steady(rs[0]) + steady(rs[1])
		if tol := tolerance(); sum < 0.30-tol || sum > 0.30+tol {
			msg := fmt.Sprintf("two processes under one 30 %% limit were busy %.3f together (%v, %v), want 0.30 ± %.2f", sum, rs[0].Windows, rs[1].Windows, tol)
			return []miss{{[]int{0, 1}, msg}}
		}
		return nil
	})
}

// twoPods makes the shape mix for 8 s in a 30 % pod and, started `after` later, a 50 % pod on the
// same GPU (each its own usage.cache, one fakegpu state), both `force`.
func twoPods(t *testing.T, after time.Duration) func() []job {
	return func() []job {
		a, b := newEnv(t), newEnv(t)
		b.base = a.base // b's own pod (usage.cache), a's GPU (fakegpu state)
		args := []string{"--seconds", "8", "--workload=mix"}
		return []job{
			{e: a, environ: a.limited("CUDA_DEVICE_SM_LIMIT=30", "GPU_CORE_UTILIZATION_POLICY=force"), args: args},
			{e: b, environ: b.limited("CUDA_DEVICE_SM_LIMIT=50", "GPU_CORE_UTILIZATION_POLICY=force"), args: args, after: after},
		}
	}
}

// Two containers on one GPU at 30 % and 50 %: each holds its own limit.
func TestComputeLimitTwoContainersOneGPU(t *testing.T) {
	t.Parallel()
	tol := tolerance()
	runJudged(t, twoPods(t, 0), func(rs []launchResult) []miss {
		var ms []miss
		for i, want := range []float64{0.30, 0.50} {
			if got := steady(rs[i]); got < want-tol || got > want+tol {
				ms = append(ms, miss{[]int{i}, fmt.Sprintf("container at %.0f %%: busy %.3f after 2 s (windows %v), want ± %.2f", want*100, got, rs[i].Windows, tol)})
			}
		}
		return ms
	})
}

// A neighbour that starts while a container calibrates (unthrottled, its launch queue full) is
// not starved, and the calibrating container is never over its limit. Before the readings of a
// neighbour stuck behind that queue were held rather than taken for the whole device, the 50 %
// container came to 0.03-0.26.
func TestComputeLimitNeighbourStartsDuringCalibration(t *testing.T) {
	t.Parallel()
	tol := tolerance()
	for _, after := range []time.Duration{time.Second, 1500 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			t.Parallel()
			runJudged(t, twoPods(t, after), func(rs []launchResult) []miss {
				var ms []miss
				if got := steady(rs[0]); got < 0.15 || got > 0.30+tol {
					ms = append(ms, miss{[]int{0}, fmt.Sprintf("calibrating container at 30 %%: busy %.3f after 2 s (windows %v), want 0.15 .. %.2f", got, rs[0].Windows, 0.30+tol)})
				}
				if got := steady(rs[1]); got < 0.50-2*tol || got > 0.50+tol {
					ms = append(ms, miss{[]int{1}, fmt.Sprintf("neighbour at 50 %%: busy %.3f after 2 s (windows %v), want %.2f .. %.2f", got, rs[1].Windows, 0.50-2*tol, 0.50+tol)})
				}
				return ms
			})
		})
	}
}

// The pacing's calibration runs unthrottled for 1.5 s; the launches it lets through must not
// queue more than a slice's bound of work (markers.h), or the queue runs over the limit long after
// (an H200 queued 4.6 s of graph replays in it and ran them for ten seconds). launchprobe waits
// for its queued work at the end: a run of 2.5 s, a second after the calibration, ends within
// 0.15 s of it (fakegpu queues up to 1 s: 0.67 s before the bound).
func TestComputeLimitCalibrationQueuesLittle(t *testing.T) {
	t.Parallel()
	cases := [][]string{{spin1ms}, {"--workload=mix"}, {"--workload=graph"}}
	jobs := make([]job, len(cases))
	for i, args := range cases {
		e := newEnv(t)
		jobs[i] = job{e: e, environ: e.limited("CUDA_DEVICE_SM_LIMIT=60", "GPU_CORE_UTILIZATION_POLICY=force"),
			args: append([]string{"--seconds", "2.5"}, args...)}
	}
	for i, r := range runAll(t, jobs) {
		if r.ElapsedS > 2.65 {
			t.Errorf("%v at 60 %% force: the 2.5 s run ended after %.3f s: %.3f s of work was still queued", cases[i], r.ElapsedS, r.ElapsedS-2.5)
		}
	}
}

// A per-device compute limit is the physical GPU's, not the CUDA ordinal's: with
// CUDA_DEVICE_SM_LIMIT_0=30 and _1=90, a process that renumbers the GPUs
// (CUDA_VISIBLE_DEVICES=1,0) and launches on its ordinal 0 runs on the second GPU, held to 90 %;
// its ordinal 1 is the first GPU, held to 30 % (a tenant must not swap its GPUs' limits).
func TestComputeLimitIsThePhysicalGPUs(t *testing.T) {
	profile := []string{"FAKEGPU_PROFILE=2x-a16-16q", "FAKEGPU_PROFILE_DIR=" + filepath.Join(newEnv(t).p.Root, "fakegpu", "profiles"),
		"CUDA_DEVICE_SM_LIMIT_0=30", "CUDA_DEVICE_SM_LIMIT_1=90", "GPU_CORE_UTILIZATION_POLICY=force"}
	tol := tolerance()
	with := func(extra ...string) []string { return append(append([]string{}, profile...), extra...) }
	checkSteady(t, "busy", []steadyCase{
		{"ordinal 0 of 1,0 (the second GPU, 90 %)", with("CUDA_VISIBLE_DEVICES=1,0"), []string{spin1ms}, 0.90 - tol, 0.90 + tol, false},
		{"ordinal 1 of 1,0 (the first GPU, 30 %)", with("CUDA_VISIBLE_DEVICES=1,0"), []string{spin1ms, "--device=1"}, 0.30 - tol, 0.30 + tol, false},
		{"ordinal 0 (the first GPU, 30 %)", with(), []string{spin1ms}, 0.30 - tol, 0.30 + tol, false},
	})
}

// The utilisation read is the limited CUDA device's own: with CUDA_VISIBLE_DEVICES=1, CUDA
// ordinal 0 is NVML's GPU 1 (matched by UUID; by index the limiter would read the idle GPU 0 and
// never throttle).
func TestComputeLimitFollowsUUID(t *testing.T) {
	t.Parallel()
	mk := func() []job {
		e := newEnv(t)
		environ := e.limited("FAKEGPU_PROFILE=2x-a16-16q", "FAKEGPU_PROFILE_DIR="+filepath.Join(e.p.Root, "fakegpu", "profiles"),
			"CUDA_VISIBLE_DEVICES=1", "CUDA_DEVICE_SM_LIMIT=30", "GPU_CORE_UTILIZATION_POLICY=force")
		return []job{{e: e, environ: environ, args: []string{"--seconds", "6", spin1ms}}}
	}
	runJudged(t, mk, func(rs []launchResult) []miss {
		if r, tol := rs[0], tolerance(); steady(r) < 0.30-tol || steady(r) > 0.30+tol {
			return []miss{{[]int{0}, fmt.Sprintf("busy %.3f after 2 s (windows %v), want 0.30 ± %.2f", steady(r), r.Windows, tol)}}
		}
		return nil
	})
}

// Kernels longer than the pacing's control step, without the node scheduler (no grant file), at
// 30 % force, judged by fakegpu's record of the work its engine completed for the process
// (harness/gpuwork), read every 100 ms. The pacing charges each launch its measured GPU time, a
// launch still running its time so far, so a 1 s kernel is followed by 2.33 s of holding back and
// a 5 s kernel by 11.67 s. A 1 s kernel's cycle is 3.33 s: every 10 s window after the first 2 s
// holds three of them, 0.30 ± 0.03. A 5 s kernel's cycle is 16.67 s: a 10 s window inside its
// holding back does nothing, whatever the limiter, so the 5 s case is judged over its cycle, from
// its first kernel's start to its second's. Before the pacing charged GPU time, both were busy
// 1.00 (a launch cost a unit of a rate that never went below a unit a second).
func TestComputeLimitLongKernels(t *testing.T) {
	t.Parallel()
	tol := tolerance()
	force := []string{"CUDA_DEVICE_SM_LIMIT=30", "GPU_CORE_UTILIZATION_POLICY=force", "LIBCUDA_LOG_LEVEL=3"}
	t.Run("1s", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		rec := runRecorded(t, e, e.limited(force...), 14, []string{"--kernel-us=1000000"}, nil)
		var long []float64
		for from := 2.0; from+10 <= 14; from++ {
			long = append(long, rec.share(from, from+10))
		}
		t.Logf("1 s kernels at 30 %%: 10 s windows after 2 s %.3f; 1 s windows %.2f", long, rec.windows(14))
		for i, v := range long {
			if v < 0.30-tol || v > 0.30+tol {
				t.Errorf("1 s kernels at 30 %% force: the 10 s window from %d s did %.3f of the GPU's work (windows %.3f), want 0.30 ± %.2f",
					i+2, v, long, tol)
			}
		}
		// The log says once that the device is paced by the library alone (no grant file at all).
		alone := regexp.MustCompile(`compute limit: device 0: [^\n]*paced by this library alone`)
		if n := len(alone.FindAllString(rec.stderr, -1)); n != 1 {
			t.Errorf("the log says %d times that device 0 is paced by this library alone, want once:\n%s", n, rec.stderr)
		}
	})
	t.Run("5s", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		// The second kernel must start by 18.5 s (a cycle's share of at least 0.27); the run stops
		// once it has started.
		started := func(r *recorded) bool { return r.last() > 5.3 }
		rec := runRecorded(t, e, e.limited(force...), 18.6, []string{"--kernel-us=5000000"}, started)
		first, second := rec.kernelStart(0, 5), rec.kernelStart(5, 5)
		if first < 0 {
			t.Fatalf("5 s kernels at 30 %% force: no kernel ran (1 s windows %.2f)", rec.windows(18))
		}
		share := 5 / (rec.end() - first)
		if second > 0 {
			share = 5 / (second - first)
		}
		t.Logf("5 s kernels at 30 %%: first kernel at %.2f s, second at %.2f s: the cycle did %.3f of the GPU's work; 1 s windows %.2f",
			first, second, share, rec.windows(18))
		if share < 0.30-tol || share > 0.30+tol {
			t.Errorf("5 s kernels at 30 %% force: the first kernel's cycle (from its start at %.2f s to the next's at %.2f s, -1: none by %.1f s) did %.3f of the GPU's work, want 0.30 ± %.2f",
				first, second, rec.end(), share, tol)
		}
	})
}

// recorded is one launchprobe run's completed work, as fakegpu recorded it: at[i] seconds after
// the run started, the process had done work[i] seconds of work.
type recorded struct {
	at     []float64
	work   []float64
	stderr string
}

func (r *recorded) add(at, work float64) { r.at, r.work = append(r.at, at), append(r.work, work) }

// last is the work done by the latest reading.
func (r *recorded) last() float64 { return r.work[len(r.work)-1] }

func (r *recorded) end() float64 { return r.at[len(r.at)-1] }

// workAt is the work done by time x, linear between two readings (fakegpu credits a kernel's
// work as it runs).
func (r *recorded) workAt(x float64) float64 {
	for i := 1; i < len(r.at); i++ {
		if r.at[i] >= x {
			f := (x - r.at[i-1]) / (r.at[i] - r.at[i-1])
			return r.work[i-1] + f*(r.work[i]-r.work[i-1])
		}
	}
	return r.work[len(r.work)-1]
}

// share is the GPU's work done for the process over [from, to], per second.
func (r *recorded) share(from, to float64) float64 {
	return (r.workAt(to) - r.workAt(from)) / (to - from)
}

func (r *recorded) windows(n int) []float64 {
	var w []float64
	for i := 0; i < n && float64(i+1) <= r.end(); i++ {
		w = append(w, r.share(float64(i), float64(i+1)))
	}
	return w
}

// kernelStart is when the kernel that ran after `before` seconds of work started, for kernels of
// `length` seconds each running alone: a reading in its run tells (at - (work - before)); -1
// when no reading falls in it.
func (r *recorded) kernelStart(before, length float64) float64 {
	for i := range r.at {
		if r.work[i] > before+0.05 && r.work[i] < before+length-0.05 {
			return r.at[i] - (r.work[i] - before)
		}
	}
	return -1
}

// runRecorded runs launchprobe for seconds on e's own fake GPU, reading fakegpu's work record
// every 100 ms, until it ends or stop says so (then it is killed: its result is not needed).
func runRecorded(t *testing.T, e *env, environ []string, seconds float64, args []string, stop func(*recorded) bool) *recorded {
	t.Helper()
	const name = "longkernels"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rd, err := gpuwork.Open(ctx, filepath.Join(e.p.Bin, "gpuwork"), e.base)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	read := func() (uint64, float64) {
		s, err := rd.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		w, err := s.ContainerWork(name, 0)
		if err != nil {
			t.Fatal(err)
		}
		return s.NowNS, float64(w.WorkNS) / 1e9
	}
	t0, _ := read()
	c := e.cmd(append(append([]string{}, environ...), "FAKEGPU_CONTAINER="+name), "hamicore-launchprobe",
		append([]string{"--seconds", strconv.FormatFloat(seconds, 'f', 1, 64)}, args...)...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	ended := false
	defer func() { // a failed reading leaves no probe behind
		if !ended {
			_ = c.Process.Kill()
			<-done
		}
	}()
	rec := &recorded{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		now, w := read()
		rec.add(float64(now-t0)/1e9, w)
		select {
		case err := <-done:
			ended = true
			now, w := read()
			rec.add(float64(now-t0)/1e9, w)
			rec.stderr = errb.String()
			if err != nil {
				t.Fatalf("launchprobe %v: %v\nstdout: %s\nstderr: %s", args, err, out.String(), errb.String())
			}
			return rec
		case <-tick.C:
		}
		if stop != nil && stop(rec) {
			_ = c.Process.Kill()
			<-done
			ended = true
			rec.stderr = errb.String()
			return rec
		}
	}
}
