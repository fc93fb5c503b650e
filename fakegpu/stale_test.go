package fakegpu_test

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/limitbed/limitbed/fakegpu/fakegputest"
)

// TestNVMLStaleRecords: with FAKEGPU_NVML_STALE_MS a process that ended stays in the NVML process
// list of a reader that listed it alive, with what it held last, for that long (a real driver's
// record outlives its process while the context is torn down); without it, it is gone at once.
// Not parallel: the library and its environment are per process.
func TestNVMLStaleRecords(t *testing.T) {
	skipIfSanitized(t)
	for _, stale := range []time.Duration{0, 1500 * time.Millisecond} {
		h := fakegputest.NewHost(t, "a16-16q")
		for _, kv := range h.Env {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		t.Setenv("FAKEGPU_NVML_STALE_MS", strconv.FormatInt(stale.Milliseconds(), 10))
		lib := nvml.New(nvml.WithLibraryPath(filepath.Join(h.Paths.Lib, "libnvidia-ml.so.1")))
		must(t, "Init", lib.Init())
		dev, ret := lib.DeviceGetHandleByIndex(0)
		must(t, "handle", ret)
		listed := func() map[int]uint64 {
			procs, ret := dev.GetComputeRunningProcesses()
			must(t, "processes", ret)
			out := map[int]uint64{}
			for _, p := range procs {
				out[int(p.Pid)] = p.UsedGpuMemory
			}
			return out
		}
		c, probe := h.Hold("--mib", "1000")
		held := listed()[c.Process.Pid]
		if held < 1000<<20 {
			t.Fatalf("stale %v: the holder %d (%+v) is listed with %d bytes", stale, c.Process.Pid, probe, held)
		}
		_ = c.Process.Kill()
		_ = c.Wait()
		ended := time.Now()
		if got, ok := listed()[c.Process.Pid]; stale == 0 && ok {
			t.Errorf("without FAKEGPU_NVML_STALE_MS an ended process is listed (%d bytes)", got)
		} else if stale > 0 && got != held {
			t.Errorf("stale %v: the ended process is listed with %d bytes, want %d", stale, got, held)
		}
		if stale > 0 {
			time.Sleep(time.Until(ended.Add(stale + 100*time.Millisecond)))
			if got, ok := listed()[c.Process.Pid]; ok {
				t.Errorf("stale %v: still listed after it (%d bytes)", stale, got)
			}
		}
		must(t, "Shutdown", lib.Shutdown())
	}
}
