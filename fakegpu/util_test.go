package fakegpu_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/limitbed/limitbed/fakegpu/fakegputest"
)

// Kernel launches keep the simulated engine busy: NVML utilisation rises under load, is
// attributed to the launching process, and falls back to 0 once the device is idle.
func TestLaunchLoadRaisesUtilisation(t *testing.T) {
	t.Parallel()
	// 150 launches of 10 ms: 1.5 s of work, sampled over a 500 ms window.
	h := fakegputest.NewHost(t, "a16-16q", "FAKEGPU_LAUNCH_NS=10000000", "FAKEGPU_UTIL_WINDOW_MS=500")
	if u := h.Info().Devices[0].Util; u == nil || *u != 0 {
		t.Fatalf("idle utilisation %v, want 0", u)
	}
	c := h.Cmd("cudaprobe", "--launch", "150", "--hold", "0.2")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	eventually(t, 3*time.Second, "utilisation >= 80% under load", func() (bool, string) {
		d := h.Info().Devices[0]
		if d.Util == nil || len(d.Processes) != 1 || d.Processes[0].SMUtil == nil {
			return false, fmt.Sprintf("%+v", d)
		}
		return *d.Util >= 80 && *d.Processes[0].SMUtil >= 80, fmt.Sprintf("gpu %d%%, process %d%%", *d.Util, *d.Processes[0].SMUtil)
	})
	if err := <-done; err != nil {
		t.Fatalf("cudaprobe: %v", err)
	}
	eventually(t, 3*time.Second, "utilisation back to 0 when idle", func() (bool, string) {
		u := h.Info().Devices[0].Util
		return u != nil && *u == 0, fmt.Sprint(*u)
	})
}

// FAKEGPU_NVML_SAMPLES=periodic gives per-process samples as an H200 does: none before a process
// has been busy a whole window, then one per window, in steps of 20 % while two processes share
// the engine (the time-slicing the H200 showed). The default stays exact.
func TestPeriodicProcessSamples(t *testing.T) {
	t.Parallel()
	h := fakegputest.NewHost(t, "a16-16q", "FAKEGPU_LAUNCH_NS=10000000", "FAKEGPU_UTIL_WINDOW_MS=500", "FAKEGPU_NVML_SAMPLES=periodic")
	var done []chan error
	for i := 0; i < 2; i++ { // 2 × 2 s of work on one engine: both busy for ~4 s
		c := h.Cmd("cudaprobe", "--launch", "200", "--hold", "0.2")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		ch := make(chan error, 1)
		go func() { ch <- c.Wait() }()
		done = append(done, ch)
	}
	eventually(t, 3*time.Second, "both processes listed", func() (bool, string) {
		d := h.Info().Devices[0]
		return len(d.Processes) == 2, fmt.Sprintf("%+v", d.Processes)
	})
	// Listed at once, but sampled only after a whole window of work.
	if d := h.Info().Devices[0]; len(d.Processes) == 2 && d.Processes[0].SMUtil != nil && d.Processes[1].SMUtil != nil {
		t.Logf("both sampled already (the first window may have passed): %v %v", *d.Processes[0].SMUtil, *d.Processes[1].SMUtil)
	}
	// Five readings in a row (exact shares of two equal processes hover at 50 %, which is no step).
	var seen []string
	eventually(t, 3*time.Second, "both sampled in 20 % steps, summing to about the whole engine, 5 times in a row", func() (bool, string) {
		d := h.Info().Devices[0]
		if len(d.Processes) != 2 || d.Processes[0].SMUtil == nil || d.Processes[1].SMUtil == nil {
			seen = nil
			return false, fmt.Sprintf("%+v", d.Processes)
		}
		a, b := *d.Processes[0].SMUtil, *d.Processes[1].SMUtil
		if a%20 != 0 || b%20 != 0 || a+b < 80 || a+b > 120 {
			seen = nil
			return false, fmt.Sprintf("%d%% and %d%%", a, b)
		}
		seen = append(seen, fmt.Sprintf("%d/%d", a, b))
		time.Sleep(50 * time.Millisecond)
		return len(seen) >= 5, fmt.Sprint(seen)
	})
	for _, ch := range done {
		if err := <-ch; err != nil {
			t.Fatalf("cudaprobe: %v", err)
		}
	}
}

// A process that has not been busy a whole window has no periodic sample yet.
func TestPeriodicProcessSamplesNeedAWholeWindow(t *testing.T) {
	t.Parallel()
	h := fakegputest.NewHost(t, "a16-16q", "FAKEGPU_LAUNCH_NS=10000000", "FAKEGPU_UTIL_WINDOW_MS=2000", "FAKEGPU_NVML_SAMPLES=periodic")
	c := h.Cmd("cudaprobe", "--launch", "100", "--hold", "0.2")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Wait() }()
	eventually(t, 3*time.Second, "the process listed", func() (bool, string) {
		d := h.Info().Devices[0]
		return len(d.Processes) == 1, fmt.Sprintf("%+v", d.Processes)
	})
	// 1 s of 10 ms kernels, a 2 s window: never busy a whole window, so never sampled.
	for i := 0; i < 5; i++ {
		if d := h.Info().Devices[0]; len(d.Processes) == 1 && d.Processes[0].SMUtil != nil {
			t.Fatalf("sampled after %d checks: %d%%, want no sample before a whole window", i, *d.Processes[0].SMUtil)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

func TestSamplesModeIsChecked(t *testing.T) {
	t.Parallel()
	h := fakegputest.NewHost(t, "a16-16q", "FAKEGPU_NVML_SAMPLES=sometimes")
	out, err := h.Cmd("gpuinfo").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "FAKEGPU_NVML_SAMPLES") || !strings.Contains(string(out), "periodic") {
		t.Fatalf("gpuinfo with FAKEGPU_NVML_SAMPLES=sometimes: err %v, output %s; want an error naming the variable and its values", err, out)
	}
}

// FAKEGPU_POWER_BOOST models a power-capped GPU: the SM clock is the full-load clock times the
// boost while the device idles, and falls back to it under full load (kernels speed up alike).
func TestPowerBoostFollowsLoad(t *testing.T) {
	t.Parallel()
	h := fakegputest.NewHost(t, "a16-16q", "FAKEGPU_LAUNCH_NS=10000000", "FAKEGPU_POWER_BOOST=125")
	if c := h.Info().Devices[0].Clock; c == nil || *c != 1875 {
		t.Fatalf("idle SM clock %v, want 1875 MHz (1500 x 1.25)", c)
	}
	c := h.Cmd("cudaprobe", "--launch", "200", "--hold", "0.2")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Wait() }()
	eventually(t, 3*time.Second, "SM clock at the full-load 1500 MHz under load", func() (bool, string) {
		d := h.Info().Devices[0]
		return d.Clock != nil && *d.Clock == 1500, fmt.Sprint(*d.Clock)
	})
	if c := fakegputest.NewHost(t, "a16-16q").Info().Devices[0].Clock; c == nil || *c != 1500 {
		t.Fatalf("SM clock without FAKEGPU_POWER_BOOST %v, want 1500 MHz", c)
	}
}

func TestPowerBoostIsChecked(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"99", "401", "1.25", "fast"} {
		h := fakegputest.NewHost(t, "a16-16q", "FAKEGPU_POWER_BOOST="+v)
		out, err := h.Cmd("gpuinfo").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "FAKEGPU_POWER_BOOST") {
			t.Errorf("gpuinfo with FAKEGPU_POWER_BOOST=%s: err %v, output %s; want an error naming the variable", v, err, out)
		}
	}
}

// FAKEGPU_KERNEL_POWER_PCT: a process's kernels draw that part of a full-load kernel's power, so a
// GPU they keep busy runs above its full-load clock, as far as the power cap allows (an H100: a
// loop of small GEMMs synchronised one by one ran at 1634 MHz alone, dense GEMMs at 1401).
func TestKernelPowerMovesTheClock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		power string
		want  int // MHz: 1500 / (power / 100), at most 1500 x 1.25
	}{
		{"90", 1667},
		{"100", 1500},
		{"60", 1875},
	} {
		h := fakegputest.NewHost(t, "a16-16q", "FAKEGPU_LAUNCH_NS=10000000", "FAKEGPU_POWER_BOOST=125")
		c := h.Cmd("cudaprobe", "--launch", "400", "--hold", "0.2")
		c.Env = append(c.Env, "FAKEGPU_KERNEL_POWER_PCT="+tc.power)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, fmt.Sprintf("kernels at %s %% of the power: busy, SM clock %d ± 15 MHz", tc.power, tc.want), func() (bool, string) {
			d := h.Info().Devices[0]
			busy := d.Util != nil && *d.Util >= 95
			near := d.Clock != nil && *d.Clock >= tc.want-15 && *d.Clock <= tc.want+15 // whole percents of speed
			return busy && near, fmt.Sprintf("clock %v MHz, utilisation %v %%", deref(d.Clock), deref(d.Util))
		})
		_ = c.Process.Kill() // seen: the rest of its 4 s of kernels is not needed
		_ = c.Wait()
	}
	h := fakegputest.NewHost(t, "a16-16q")
	for _, v := range []string{"0", "101", "half"} {
		c := h.Cmd("cudaprobe", "--launch", "1")
		c.Env = append(c.Env, "FAKEGPU_KERNEL_POWER_PCT="+v)
		if out, err := c.CombinedOutput(); err == nil || !strings.Contains(string(out), "FAKEGPU_KERNEL_POWER_PCT") {
			t.Errorf("cudaprobe with FAKEGPU_KERNEL_POWER_PCT=%s: err %v, output %s; want an error naming the variable", v, err, out)
		}
	}
}

func deref(p *int) any {
	if p == nil {
		return "none"
	}
	return *p
}
