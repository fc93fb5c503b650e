package fakegpu_test

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/limitbed/limitbed/fakegpu/fakegputest"
)

// The a16-16q card: 16384 MiB, a 300 MiB primary context, and 4096 MiB granted.
func TestCudaprobeA16(t *testing.T) {
	t.Parallel()
	h := fakegputest.NewHost(t, "a16-16q")
	got := h.Probe("--mib", "4096")
	if got.TotalMiB != 16384 || got.GrantedMiB != 4096 || got.Error != nil || got.FreeMiB != 16384-300-4096 {
		t.Errorf("got %+v; want total 16384, 4096 granted, free %d", got, 16384-300-4096)
	}
	if got.Name != "NVIDIA A16-16Q" || got.UUID != "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50" || got.Driver != 12040 {
		t.Errorf("identity %q %q %d", got.Name, got.UUID, got.Driver)
	}
	// More than the card has: refused after what fits, and the probe still exits 0.
	got = h.Probe("--mib", "20000", "--chunk-mib", "1000")
	if got.GrantedMiB != 16000 || str(got.Error) != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("oversubscription: %+v", got)
	}
	// Usage errors are exit 2.
	if _, _, code := h.Run("cudaprobe", "--alloc=nope"); code != 2 {
		t.Errorf("bad --alloc: exit %d, want 2", code)
	}
}

// Two processes on one host see each other's memory, and a SIGKILLed one's memory comes back.
func TestProcessesShareTheDevice(t *testing.T) {
	t.Parallel()
	h := fakegputest.NewHost(t, "a16-16q")
	first, a := h.Hold("--mib", "2048")
	second, b := h.Hold("--mib", "1024")
	if b.FreeMiB != 16384-(2048+300)-(1024+300) {
		t.Errorf("second process sees free %d MiB, want %d", b.FreeMiB, 16384-(2048+300)-(1024+300))
	}
	inf := h.Info()
	used := map[int]int{}
	for _, p := range inf.Devices[0].Processes {
		used[p.PID] = p.Used
	}
	if used[a.PID] != 2048+300 || used[b.PID] != 1024+300 || len(used) != 2 {
		t.Errorf("gpuinfo processes %v, want %d:%d %d:%d", used, a.PID, 2348, b.PID, 1324)
	}
	if inf.Devices[0].Used != 2348+1324 {
		t.Errorf("gpuinfo used %d MiB, want %d", inf.Devices[0].Used, 2348+1324)
	}

	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	inf = h.Info()
	if len(inf.Devices[0].Processes) != 1 || inf.Devices[0].Processes[0].PID != b.PID || inf.Devices[0].Used != 1324 {
		t.Errorf("after SIGKILL: %+v, want only pid %d with 1324 MiB", inf.Devices[0], b.PID)
	}
	if got := h.Probe("--mib", "0"); got.FreeMiB != 16384-1324-300 {
		t.Errorf("after SIGKILL a new process sees free %d, want %d", got.FreeMiB, 16384-1324-300)
	}
	_ = second.Process.Signal(syscall.SIGTERM) // clean exit path: frees and releases
	_ = second.Wait()
	if inf = h.Info(); inf.Devices[0].Used != 0 {
		t.Errorf("after both exited: used %d MiB", inf.Devices[0].Used)
	}
}

// The three ways to reach the driver give the same answers for every allocation kind.
func TestAPIsAgree(t *testing.T) {
	t.Parallel()
	for _, alloc := range []string{"mem", "managed", "pitch", "async", "vmm", "array"} {
		var base *fakegputest.Probe
		for _, api := range []string{"symbols", "dlsym", "procaddress"} {
			h := fakegputest.NewHost(t, "a16-16q")
			got := h.Probe("--api="+api, "--alloc="+alloc, "--mib", "1000", "--chunk-mib", "250", "--threads", "2",
				"--launch", "3")
			if got.API != api || got.Alloc != alloc {
				t.Fatalf("probe ran %s/%s, asked %s/%s", got.API, got.Alloc, api, alloc)
			}
			if got.GrantedMiB != 1000 || got.Error != nil || got.FreeMiB != 16384-300-1000 || got.Launched != 3 ||
				got.LaunchError != nil {
				t.Errorf("%s/%s: %+v", api, alloc, got)
			}
			got.PID, got.API = 0, ""
			if base == nil {
				base = &got
			} else if fmt.Sprint(got) != fmt.Sprint(*base) {
				t.Errorf("%s/%s differs from symbols:\n got %+v\nwant %+v", api, alloc, got, *base)
			}
		}
	}
}

// MIG: each instance is its own CUDA device with its own memory; NVML attributes the process.
func TestMIGInstances(t *testing.T) {
	t.Parallel()
	h := fakegputest.NewHost(t, "a100-mig")
	_, got := h.Hold("--device", "2", "--mib", "4096")
	if got.TotalMiB != 9856 || got.Name != "NVIDIA A100-SXM4-40GB MIG 2g.10gb" || got.GrantedMiB != 4096 {
		t.Errorf("MIG device 2: %+v", got)
	}
	if full := h.Probe("--device", "0", "--mib", "4864"); str(full.Error) != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("a 1g.5gb instance granted its whole memory on top of a context: %+v", full)
	}
	d := h.Info().Devices[0]
	if d.Util != nil || len(d.MIG) != 3 || d.MIG[2].Used != 4096+300 || d.Used != 4396 {
		t.Errorf("gpuinfo: %+v", d)
	}
	if len(d.Processes) != 1 || d.Processes[0].GI == nil || *d.Processes[0].GI != 3 {
		t.Errorf("processes: %+v, want one on GPU instance 3", d.Processes)
	}
}
