package fakegpu_test

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/internal/tier"
)

// go-nvml loads the library in this process: a sanitizer build cannot be dlopen'ed into Go.
func skipIfSanitized(t *testing.T) {
	tier.Require(t, tier.Unsanitized)
}

type wantMIG struct {
	name, uuid string
	gi, ci     int
	memMiB     uint64
}

type wantGPU struct {
	name, uuid, busID string
	memMiB            uint64
	arch              nvml.DeviceArchitecture
	ccMajor, ccMinor  int
	migMode           nvml.Return // of GetMigMode: SUCCESS or ERROR_NOT_SUPPORTED
	mig               []wantMIG
}

// TestGoNVMLDiscovery walks the fake devices with go-nvml exactly as the device plugin does.
// Not parallel: the library and its environment are per process.
func TestGoNVMLDiscovery(t *testing.T) {
	skipIfSanitized(t)
	p := cbuild.Build(t)
	cases := []struct {
		profile string
		gpus    []wantGPU
	}{
		{"a16-16q", []wantGPU{{
			name: "NVIDIA A16-16Q", uuid: "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50", busID: "00000000:00:05.0",
			memMiB: 16384, arch: nvml.DEVICE_ARCH_AMPERE, ccMajor: 8, ccMinor: 6, migMode: nvml.ERROR_NOT_SUPPORTED,
		}}},
		{"2x-a16-16q", []wantGPU{
			{name: "NVIDIA A16-16Q", uuid: "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50", busID: "00000000:00:05.0",
				memMiB: 16384, arch: nvml.DEVICE_ARCH_AMPERE, ccMajor: 8, ccMinor: 6, migMode: nvml.ERROR_NOT_SUPPORTED},
			{name: "NVIDIA A16-16Q", uuid: "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f51", busID: "00000000:00:06.0",
				memMiB: 16384, arch: nvml.DEVICE_ARCH_AMPERE, ccMajor: 8, ccMinor: 6, migMode: nvml.ERROR_NOT_SUPPORTED},
		}},
		{"a100-mig", []wantGPU{{
			name: "NVIDIA A100-SXM4-40GB", uuid: "GPU-a1000000-4040-4a00-8000-00000000a101", busID: "00000000:07:00.0",
			memMiB: 40960, arch: nvml.DEVICE_ARCH_AMPERE, ccMajor: 8, ccMinor: 0, migMode: nvml.SUCCESS,
			mig: []wantMIG{
				{"NVIDIA A100-SXM4-40GB MIG 1g.5gb", "MIG-5b1c0d2e-1111-5a3b-9c4d-0e1f2a3b4c01", 7, 0, 4864},
				{"NVIDIA A100-SXM4-40GB MIG 1g.5gb", "MIG-5b1c0d2e-2222-5a3b-9c4d-0e1f2a3b4c02", 8, 0, 4864},
				{"NVIDIA A100-SXM4-40GB MIG 2g.10gb", "MIG-5b1c0d2e-3333-5a3b-9c4d-0e1f2a3b4c03", 3, 0, 9856},
			},
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.profile, func(t *testing.T) {
			t.Setenv("FAKEGPU_PROFILE", tc.profile)
			t.Setenv("FAKEGPU_PROFILE_DIR", filepath.Join(p.Root, "fakegpu", "profiles"))
			t.Setenv("FAKEGPU_STATE_DIR", t.TempDir())
			lib := nvml.New(nvml.WithLibraryPath(filepath.Join(p.Lib, "libnvidia-ml.so.1")))
			must(t, "Init", lib.Init())
			defer func() { must(t, "Shutdown", lib.Shutdown()) }()

			drv, ret := lib.SystemGetDriverVersion()
			must(t, "SystemGetDriverVersion", ret)
			cuda, ret := lib.SystemGetCudaDriverVersion()
			must(t, "SystemGetCudaDriverVersion", ret)
			if drv != "550.90.07" || cuda != 12040 {
				t.Errorf("driver %q cuda %d, want 550.90.07 12040", drv, cuda)
			}
			n, ret := lib.DeviceGetCount()
			must(t, "DeviceGetCount", ret)
			if n != len(tc.gpus) {
				t.Fatalf("DeviceGetCount = %d, want %d", n, len(tc.gpus))
			}
			for i, want := range tc.gpus {
				d, ret := lib.DeviceGetHandleByIndex(i)
				must(t, "DeviceGetHandleByIndex", ret)
				checkGPU(t, lib, d, i, want)
			}
			// Health checking: an event set exists (nvidia-smi needs one), no device raises events,
			// and a wait times out after its timeout, as on a GPU that raised none.
			set, ret := lib.EventSetCreate()
			must(t, "EventSetCreate", ret)
			d0, _ := lib.DeviceGetHandleByIndex(0)
			if ret := d0.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.ERROR_NOT_SUPPORTED {
				t.Errorf("RegisterEvents = %v, want NOT_SUPPORTED", ret)
			}
			start := time.Now()
			if _, ret := set.Wait(20); ret != nvml.ERROR_TIMEOUT || time.Since(start) < 20*time.Millisecond {
				t.Errorf("EventSet.Wait(20) = %v after %v, want TIMEOUT after 20 ms", ret, time.Since(start))
			}
			must(t, "EventSetFree", set.Free())
		})
	}
}

func checkGPU(t *testing.T, lib nvml.Interface, d nvml.Device, index int, want wantGPU) {
	t.Helper()
	name, ret := d.GetName()
	uuid, ret2 := d.GetUUID()
	mem, ret3 := d.GetMemoryInfo()
	mem2, ret4 := d.GetMemoryInfo_v2()
	pci, ret5 := d.GetPciInfo()
	for what, r := range map[string]nvml.Return{"GetName": ret, "GetUUID": ret2, "GetMemoryInfo": ret3,
		"GetMemoryInfo_v2": ret4, "GetPciInfo": ret5} {
		must(t, what, r)
	}
	busID := strings.TrimRight(string(pciBytes(pci.BusId[:])), "\x00")
	if name != want.name || uuid != want.uuid || mem.Total != want.memMiB<<20 || mem2.Total != want.memMiB<<20 ||
		busID != want.busID {
		t.Errorf("device %d: %q %q %d MiB (v2 %d) bus %q; want %q %q %d MiB bus %q", index, name, uuid, mem.Total>>20,
			mem2.Total>>20, busID, want.name, want.uuid, want.memMiB, want.busID)
	}
	if got, ret := d.GetIndex(); ret != nvml.SUCCESS || got != index {
		t.Errorf("GetIndex = %d, %v", got, ret)
	}
	if got, ret := d.GetMinorNumber(); ret != nvml.SUCCESS || got != index {
		t.Errorf("GetMinorNumber = %d, %v", got, ret)
	}
	if got, ret := d.GetArchitecture(); ret != nvml.SUCCESS || got != want.arch {
		t.Errorf("GetArchitecture = %v, %v", got, ret)
	}
	if ma, mi, ret := d.GetCudaComputeCapability(); ret != nvml.SUCCESS || ma != want.ccMajor || mi != want.ccMinor {
		t.Errorf("GetCudaComputeCapability = %d.%d, %v", ma, mi, ret)
	}
	if procs, ret := d.GetComputeRunningProcesses(); ret != nvml.SUCCESS || len(procs) != 0 {
		t.Errorf("GetComputeRunningProcesses = %v, %v; want none", procs, ret)
	}
	if byUUID, ret := lib.DeviceGetHandleByUUID(want.uuid); ret != nvml.SUCCESS || byUUID != d {
		t.Errorf("DeviceGetHandleByUUID = %v, %v", byUUID, ret)
	}
	cur, _, ret := d.GetMigMode()
	if ret != want.migMode {
		t.Fatalf("GetMigMode = %v, want %v", ret, want.migMode)
	}
	if ret != nvml.SUCCESS {
		return
	}
	if (cur == nvml.DEVICE_MIG_ENABLE) != (len(want.mig) > 0) {
		t.Errorf("MIG mode %d with %d instances", cur, len(want.mig))
	}
	checkMIG(t, d, want.mig)
}

// checkMIG: the GPU's MIG handles are the profile's instances, in order, each a MIG handle of d.
func checkMIG(t *testing.T, d nvml.Device, want []wantMIG) {
	t.Helper()
	max, ret := d.GetMaxMigDeviceCount()
	must(t, "GetMaxMigDeviceCount", ret)
	var found []wantMIG
	for i := 0; i < max; i++ {
		m, ret := d.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		must(t, "GetMigDeviceHandleByIndex", ret)
		if is, ret := m.IsMigDeviceHandle(); ret != nvml.SUCCESS || !is {
			t.Errorf("IsMigDeviceHandle = %v, %v", is, ret)
		}
		if is, _ := d.IsMigDeviceHandle(); is {
			t.Errorf("the GPU handle reads as a MIG handle")
		}
		parent, ret := m.GetDeviceHandleFromMigDeviceHandle()
		if ret != nvml.SUCCESS || parent != d {
			t.Errorf("GetDeviceHandleFromMigDeviceHandle = %v, %v", parent, ret)
		}
		// NVML: a MIG handle's index is the one GetMigDeviceHandleByIndex takes (nvidia-smi's
		// "MIG Dev" column).
		if idx, ret := m.GetIndex(); ret != nvml.SUCCESS || idx != i {
			t.Errorf("MIG device %d: GetIndex = %d, %v; want %d", i, idx, ret, i)
		}
		var w wantMIG
		var r [5]nvml.Return
		w.name, r[0] = m.GetName()
		w.uuid, r[1] = m.GetUUID()
		w.gi, r[2] = m.GetGpuInstanceId()
		w.ci, r[3] = m.GetComputeInstanceId()
		mm, r4 := m.GetMemoryInfo()
		r[4] = r4
		w.memMiB = mm.Total >> 20
		for _, x := range r {
			must(t, "MIG query", x)
		}
		found = append(found, w)
	}
	if len(found) != len(want) {
		t.Fatalf("MIG instances %+v, want %+v", found, want)
	}
	for i := range found {
		if found[i] != want[i] {
			t.Errorf("MIG %d = %+v, want %+v", i, found[i], want[i])
		}
	}
}

func pciBytes[T int8 | uint8](b []T) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		out[i] = byte(c)
	}
	return out
}

func must(t *testing.T, what string, ret nvml.Return) {
	t.Helper()
	if ret != nvml.SUCCESS {
		t.Fatalf("%s: %v", what, nvml.ErrorString(ret))
	}
}

// TestExportsCoverGoNVML: go-nvml binds lazily, so any C function it can call that the library
// lacks would kill the process on first use. Every one must be exported.
func TestExportsCoverGoNVML(t *testing.T) {
	p := cbuild.Build(t)
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/NVIDIA/go-nvml").Output()
	if err != nil {
		tier.Unavailable(t, tier.ModuleCache.For("go-nvml's source"), err.Error())
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "pkg", "nvml")
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	re := regexp.MustCompile(`C\.(nvml[A-Za-z0-9_]+)\(`)
	called := map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			called[string(m[1])] = true
		}
	}
	if len(called) < 300 {
		t.Fatalf("found only %d C calls in %s: has go-nvml's layout changed?", len(called), dir)
	}
	lib, err := elf.Open(filepath.Join(p.Lib, "libnvidia-ml.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	syms, err := lib.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			exported[s.Name] = true
		}
	}
	var missing []string
	for name := range called {
		if !exported[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("libnvidia-ml.so.1 lacks %d functions go-nvml calls (add them to fakegpu/src/nvml_api.def): %v",
			len(missing), missing)
	}
}
