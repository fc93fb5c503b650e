package fakegpu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/fakegpu/fakegputest"
)

// TestProfileEngineKeys: a profile states its card's time slice, NVML sample mode, power cap and
// full-load SM clock (h200-141g has the H200's), and the FAKEGPU_* variables still override them.
func TestProfileEngineKeys(t *testing.T) {
	t.Parallel()
	h := fakegputest.NewHost(t, "h200-141g")
	if c := h.Info().Devices[0].Clock; c == nil || *c != 1977 {
		t.Errorf("idle SM clock %v, want 1977 MHz (sm_clock_mhz 1521 x power_boost 130 %%)", c)
	}
	if _, errOut, code := h.Run("cudaprobe", "--launch", "1"); code != 0 {
		t.Fatalf("cudaprobe: exit %d: %s", code, errOut)
	}
	if out, _, _ := h.Run("gpuwork"); !strings.Contains(out, `"timeslice_ns":2400000`) {
		t.Errorf("gpuwork: %s, want the profile's 2400 µs time slice", out)
	}
	over := fakegputest.NewHost(t, "h200-141g", "FAKEGPU_POWER_BOOST=100")
	if c := over.Info().Devices[0].Clock; c == nil || *c != 1521 {
		t.Errorf("idle SM clock with FAKEGPU_POWER_BOOST=100: %v, want 1521 MHz", c)
	}
	text, err := os.ReadFile(filepath.Join(h.Paths.Root, "fakegpu", "profiles", "h200-141g.profile"))
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.profile")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(text), "nvml_samples = periodic", "nvml_samples = sometimes", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	b := fakegputest.NewHost(t, "h200-141g", "FAKEGPU_PROFILE="+bad)
	if out, err := b.Cmd("gpuinfo").CombinedOutput(); err == nil || !strings.Contains(string(out), "nvml_samples") {
		t.Errorf("gpuinfo with nvml_samples = sometimes: err %v, output %s; want an error naming the key", err, out)
	}
}
