package fakegpu_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/limitbed/limitbed/fakegpu/fakegputest"
	"github.com/limitbed/limitbed/internal/cbuild"
)

func TestFaultInjection(t *testing.T) {
	t.Parallel()
	t.Run("FAKEGPU_FAIL_ALLOC fails the Nth allocation", func(t *testing.T) {
		t.Parallel()
		h := fakegputest.NewHost(t, "a16-16q", "FAKEGPU_FAIL_ALLOC=3")
		got := h.Probe("--mib", "1000", "--chunk-mib", "100")
		if got.GrantedMiB != 200 || str(got.Error) != "CUDA_ERROR_OUT_OF_MEMORY" {
			t.Errorf("got %+v, want 200 MiB then CUDA_ERROR_OUT_OF_MEMORY", got)
		}
	})
	t.Run("FAKEGPU_LOST_DEVICE", func(t *testing.T) {
		t.Parallel()
		h := fakegputest.NewHost(t, "2x-a16-16q", "FAKEGPU_LOST_DEVICE=1")
		out, stderr, code := h.Run("cudaprobe", "--device", "1", "--mib", "10")
		if code != 1 || !strings.Contains(out, `"error":"CUDA_ERROR_DEVICE_UNAVAILABLE"`) {
			t.Errorf("cudaprobe on the lost device: exit %d %s %s", code, out, stderr)
		}
		if got := h.Probe("--device", "0", "--mib", "10"); got.Error != nil {
			t.Errorf("the other device failed too: %+v", got)
		}
		inf := h.Info()
		if inf.Devices[1].Error != "GPU is lost" || inf.Devices[0].Error != "" || inf.Devices[1].UUID == "" {
			t.Errorf("gpuinfo: %+v", inf.Devices)
		}
	})
	t.Run("FAKEGPU_NVML_ERROR on nvmlInit", func(t *testing.T) {
		t.Parallel()
		h := fakegputest.NewHost(t, "a16-16q", "FAKEGPU_NVML_ERROR=nvmlInit_v2:NVML_ERROR_DRIVER_NOT_LOADED")
		if _, stderr, code := h.Run("gpuinfo"); code != 1 || !strings.Contains(stderr, "Driver Not Loaded") {
			t.Errorf("gpuinfo: exit %d, %q", code, stderr)
		}
	})
	t.Run("bad fault spec is a configuration error", func(t *testing.T) {
		t.Parallel()
		h := fakegputest.NewHost(t, "a16-16q", "FAKEGPU_FAIL_ALLOC=zero")
		out, stderr, code := h.Run("cudaprobe", "--mib", "10")
		if code != 1 || !strings.Contains(stderr, `fakegpu: FAKEGPU_FAIL_ALLOC="zero": want N >= 1`) ||
			!strings.Contains(out, `"error":"CUDA_ERROR_NO_DEVICE"`) {
			t.Errorf("exit %d\nstdout %s\nstderr %s", code, out, stderr)
		}
	})
}

// A malformed profile: one clear line naming file, line and key; the documented error codes; no crash.
func TestMalformedProfile(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "typo.profile")
	text := "driver_version = 550.90.07\ncuda_version = 12040\n\ndevice = 0\nname = X\n" +
		"uuid = GPU-00000000-0000-0000-0000-000000000000\nmemroy_mib = 16384\n"
	if err := os.WriteFile(bad, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	h := fakegputest.NewHost(t, bad)
	out, stderr, code := h.Run("cudaprobe", "--mib", "10")
	want := "fakegpu: profile " + bad + ` line 7: unknown key "memroy_mib" (known: name uuid memory_mib`
	if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(out, `"error":"CUDA_ERROR_NO_DEVICE"`) {
		t.Errorf("cudaprobe: exit %d\nstdout %s\nstderr %s\nwant %s", code, out, stderr, want)
	}
	if _, stderr, code := h.Run("gpuinfo"); code != 1 || !strings.Contains(stderr, want) ||
		!strings.Contains(stderr, "Driver Not Loaded") {
		t.Errorf("gpuinfo: exit %d: %s", code, stderr)
	}
	h = fakegputest.NewHost(t, "no-such-profile")
	if _, stderr, code := h.Run("gpuinfo"); code != 1 || !strings.Contains(stderr, "no-such-profile.profile: cannot open") {
		t.Errorf("missing profile: exit %d: %s", code, stderr)
	}
}

// Faults seen through go-nvml, in process (not parallel: the environment is the process's).
func TestGoNVMLFaults(t *testing.T) {
	skipIfSanitized(t)
	p := cbuild.Build(t)
	t.Setenv("FAKEGPU_PROFILE", "2x-a16-16q")
	t.Setenv("FAKEGPU_PROFILE_DIR", filepath.Join(p.Root, "fakegpu", "profiles"))
	t.Setenv("FAKEGPU_STATE_DIR", t.TempDir())
	t.Setenv("FAKEGPU_NVML_ERROR", "nvmlDeviceGetMemoryInfo:NVML_ERROR_UNKNOWN")
	t.Setenv("FAKEGPU_LOST_DEVICE", "1")
	lib := nvml.New(nvml.WithLibraryPath(filepath.Join(p.Lib, "libnvidia-ml.so.1")))
	must(t, "Init", lib.Init())
	defer lib.Shutdown()
	d0, _ := lib.DeviceGetHandleByIndex(0)
	d1, _ := lib.DeviceGetHandleByIndex(1)
	if _, ret := d0.GetMemoryInfo(); ret != nvml.ERROR_UNKNOWN {
		t.Errorf("GetMemoryInfo = %v, want ERROR_UNKNOWN", ret)
	}
	if _, ret := d0.GetMemoryInfo_v2(); ret != nvml.SUCCESS {
		t.Errorf("GetMemoryInfo_v2 = %v: the fault names one function exactly", ret)
	}
	if _, ret := d1.GetMemoryInfo_v2(); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("lost device GetMemoryInfo_v2 = %v, want ERROR_GPU_IS_LOST", ret)
	}
	if uuid, ret := d1.GetUUID(); ret != nvml.SUCCESS || uuid == "" {
		t.Errorf("lost device must still be nameable: %q %v", uuid, ret)
	}
}
