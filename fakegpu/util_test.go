package fakegpu_test

import (
	"fmt"
	"testing"
	"time"
)

// Kernel launches keep the simulated engine busy: NVML utilisation rises under load, is
// attributed to the launching process, and falls back to 0 once the device is idle.
func TestLaunchLoadRaisesUtilisation(t *testing.T) {
	t.Parallel()
	// 150 launches of 10 ms: 1.5 s of work, sampled over a 500 ms window.
	h := newHost(t, "a16-16q", "FAKEGPU_LAUNCH_NS=10000000", "FAKEGPU_UTIL_WINDOW_MS=500")
	if u := h.info().Devices[0].Util; u == nil || *u != 0 {
		t.Fatalf("idle utilisation %v, want 0", u)
	}
	c := h.cmd("cudaprobe", "--launch", "150", "--hold", "0.2")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	eventually(t, 3*time.Second, "utilisation >= 80% under load", func() (bool, string) {
		d := h.info().Devices[0]
		if d.Util == nil || len(d.Processes) != 1 || d.Processes[0].SMUtil == nil {
			return false, fmt.Sprintf("%+v", d)
		}
		return *d.Util >= 80 && *d.Processes[0].SMUtil >= 80, fmt.Sprintf("gpu %d%%, process %d%%", *d.Util, *d.Processes[0].SMUtil)
	})
	if err := <-done; err != nil {
		t.Fatalf("cudaprobe: %v", err)
	}
	eventually(t, 3*time.Second, "utilisation back to 0 when idle", func() (bool, string) {
		u := h.info().Devices[0].Util
		return u != nil && *u == 0, fmt.Sprint(*u)
	})
}
