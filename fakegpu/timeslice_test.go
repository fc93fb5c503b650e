package fakegpu_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitbed/limitbed/fakegpu/fakegputest"
	"github.com/limitbed/limitbed/harness/gpuwork"
)

// launchRun is hamicore-launchprobe's JSON line, as far as these tests read it.
type launchRun struct {
	Launches int       `json:"launches"`
	Windows  []float64 `json:"windows"`
}

// launchprobe starts hamicore-launchprobe (no libvgpu.so: the plain driver) on the host.
func launchprobe(t *testing.T, h *fakegputest.Host, args ...string) func() launchRun {
	t.Helper()
	c := h.Cmd("hamicore-launchprobe", args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return func() launchRun {
		t.Helper()
		var r launchRun
		if err := c.Wait(); err != nil {
			t.Fatalf("launchprobe %v: %v\nstdout: %s\nstderr: %s", args, err, out.String(), errb.String())
		}
		if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Launches == 0 {
			t.Fatalf("launchprobe %v: %q: %v", args, out.String(), err)
		}
		return r
	}
}

func meanAfter(w []float64, skip int) float64 {
	if len(w) <= skip {
		return -1
	}
	s := 0.0
	for _, v := range w[skip:] {
		s += v
	}
	return s / float64(len(w)-skip)
}

// Contexts of different processes are time-sliced, as on a real GPU: a process that keeps its
// launch queue full (1 s of 10 ms kernels) does not make a neighbour's later launch wait behind
// that queue. The neighbour synchronises after every 5 ms kernel (latency-bound work); time-sliced,
// each of its kernels runs in 1 ms turns with the flooder's and it gets about half the engine. One
// FIFO timeline gave it ~0.005 (each kernel behind a second of the other's work). 5 ms kernels, so
// that the synchronisations' wake-ups cost little beside them. On a loaded machine a wake-up can
// take many ms, so the bound is the order of magnitude that tells the two apart (0.05, ten times
// the FIFO's); the exact shares are the C tests' (scripted clock) and TestSharedBenchOnFakegpu's.
func TestTimeSlicedNeighbourIsNotQueuedBehindAFlood(t *testing.T) {
	t.Parallel()
	h := fakegputest.NewHost(t, "a16-16q")
	flood := launchprobe(t, h, "--seconds", "5", "--kernel-us", "10000")
	time.Sleep(time.Second)
	sync := launchprobe(t, h, "--seconds", "3", "--workload", "burst", "--burst", "1", "--kernel-us", "5000")
	s, f := sync(), flood()
	t.Logf("neighbour windows %v, flooder windows %v", s.Windows, f.Windows)
	// Windows after the neighbour's first second; the flooder's that overlap it.
	if got := meanAfter(s.Windows, 1); got < 0.05 || got > 0.6 {
		t.Errorf("synchronising neighbour: busy %.3f of the engine (windows %v), want 0.05..0.6 (about half on an idle machine; one FIFO: 0.005)", got, s.Windows)
	}
	if len(f.Windows) >= 4 {
		if got := meanAfter(f.Windows[:4], 2); got < 0.35 {
			t.Errorf("flooding process beside it: busy %.3f (windows %v), want at least 0.35 (round robin, not starved)", got, f.Windows)
		}
	}
}

// NVML reads the same timeline the engine runs: two processes that keep their queues full, one
// of 1 ms and one of 10 ms kernels, are time-sliced half and half, and each one's per-process
// utilisation (the last 1 s) is its busy time in fakegpu's own record over the same second.
func TestNVMLUtilisationFollowsTheTimeline(t *testing.T) {
	t.Parallel()
	h := fakegputest.NewHost(t, "a16-16q")
	short := launchprobe(t, h, "--seconds", "4", "--kernel-us", "1000")
	long := launchprobe(t, h, "--seconds", "4", "--kernel-us", "10000")
	defer func() { short(); long() }()
	time.Sleep(2 * time.Second)
	tool, ctx := filepath.Join(h.Paths.Bin, "gpuwork"), context.Background()
	before, err := gpuwork.Once(ctx, tool, h.Env)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	procs := h.Info().Devices[0].Processes
	after, err := gpuwork.Once(ctx, tool, h.Env)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 2 {
		t.Fatalf("NVML lists %+v, want the two processes", procs)
	}
	secs := float64(after.NowNS-before.NowNS) / 1e9
	for _, p := range procs {
		w0, err0 := before.ProcessWork(p.PID, 0)
		w1, err1 := after.ProcessWork(p.PID, 0)
		if err0 != nil || err1 != nil || p.SMUtil == nil {
			t.Fatalf("pid %d: %v %v, sm_util %v", p.PID, err0, err1, p.SMUtil)
		}
		busy := 100 * float64(w1.Since(w0).BusyNS) / 1e9 / secs
		if math.Abs(busy-50) > 5 || math.Abs(float64(*p.SMUtil)-busy) > 5 {
			t.Errorf("pid %d: NVML %d %%, fakegpu's record %.1f %% busy over %.2f s; want both about 50 %% and within 5 of each other", p.PID, *p.SMUtil, busy, secs)
		}
	}
}

// FAKEGPU_TIMESLICE_US and FAKEGPU_CONTAINER are checked like every other variable, and a GPU has
// one time slice: a process asking for another one than the GPU runs fails cuInit, naming it.
func TestTimesliceAndContainerAreChecked(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"FAKEGPU_TIMESLICE_US=9", "FAKEGPU_TIMESLICE_US=1000001", "FAKEGPU_TIMESLICE_US=1ms",
		"FAKEGPU_CONTAINER=a b", "FAKEGPU_CONTAINER=" + strings.Repeat("x", 64), "FAKEGPU_CONTAINER=pod/ctr"} {
		h := fakegputest.NewHost(t, "a16-16q", v)
		out, err := h.Cmd("gpuinfo").CombinedOutput()
		name, _, _ := strings.Cut(v, "=")
		if err == nil || !strings.Contains(string(out), name) {
			t.Errorf("gpuinfo with %s: err %v, output %s; want an error naming the variable", v, err, out)
		}
	}
	h := fakegputest.NewHost(t, "a16-16q", "FAKEGPU_TIMESLICE_US=2000", "FAKEGPU_CONTAINER=web-1.a_b")
	if p := h.Probe("--mib", "1"); str(p.Error) != "<nil>" {
		t.Fatalf("first process: %+v", p)
	}
	other := *h
	other.Env = append(append([]string{}, h.Env...), "FAKEGPU_TIMESLICE_US=1000")
	out, stderr, code := other.Run("cudaprobe", "--mib", "1")
	if code != 1 || !strings.Contains(stderr, "FAKEGPU_TIMESLICE_US") || !strings.Contains(stderr, "2000 µs") {
		t.Errorf("a process asking for 1000 µs on a GPU running 2000: exit %d, stdout %s, stderr %s; want exit 1 naming both", code, out, stderr)
	}
}
