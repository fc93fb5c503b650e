package fakegpu_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/fakegpu/fakegputest"
	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/internal/tier"
	"github.com/limitbed/limitbed/plugin/gpu/gpumock"
	"github.com/limitbed/limitbed/plugin/nvsmi"
)

// smi runs Debian's nvidia-smi (extracted, never installed: plugin/nvsmi) against h's fakegpu.
func smi(t *testing.T, h *fakegputest.Host, bin string, args ...string) string {
	t.Helper()
	c := exec.Command(bin, args...)
	c.Env = h.Env
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("nvidia-smi %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// smiBinary is the nvidia-smi these tests run, or a skip naming how to get it (a failure under CI=true).
func smiBinary(t *testing.T) string {
	t.Helper()
	bin, err := nvsmi.Locate()
	if err != nil {
		tier.Unavailable(t, tier.NvidiaSMI, err.Error())
	}
	return bin
}

// TestRealNvidiaSMI runs Debian's nvidia-smi against fakegpu for every profile, with a process
// holding 1000 MiB (+ its context) on CUDA device 0, and checks what it prints against the profile
// (names, UUIDs, memory; MIG instances) and the shared state as gpuinfo reads it (used memory,
// the process): -L, --query-gpu, --query-compute-apps, the default screen and -q.
func TestRealNvidiaSMI(t *testing.T) {
	bin := smiBinary(t)
	profiles, err := filepath.Glob(filepath.Join(repoRoot(t), "fakegpu", "profiles", "*.profile"))
	if err != nil || len(profiles) == 0 {
		t.Fatalf("no profiles: %v", err)
	}
	for _, path := range profiles {
		name := strings.TrimSuffix(filepath.Base(path), ".profile")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			gpus, err := node.ReadProfile(path)
			if err != nil {
				t.Fatal(err)
			}
			h := fakegputest.NewHost(t, name)
			_, holder := h.Hold("--mib", "1000")
			inf := h.Info()
			if len(inf.Devices) != len(gpus) {
				t.Fatalf("gpuinfo sees %d GPUs, the profile has %d", len(inf.Devices), len(gpus))
			}

			v := smiView{t: t, h: h, bin: bin, gpus: gpus, inf: inf, holder: holder}
			v.list()
			v.queryGPU()
			v.computeApps()
			v.screen()
			v.query()
		})
	}
}

// smiView is one profile's machine as TestRealNvidiaSMI reads it through the real nvidia-smi: the
// profile's GPUs, what gpuinfo sees and one process holding memory on GPU 0.
type smiView struct {
	t      *testing.T
	h      *fakegputest.Host
	bin    string
	gpus   []gpumock.GPU
	inf    fakegputest.Info
	holder fakegputest.Probe
}

// held is what fakegpu charged the holder: all that GPU 0 uses.
func (v smiView) held() int { return v.inf.Devices[0].Used }

// list: -L names every GPU and MIG instance of the profile.
func (v smiView) list() {
	v.t.Helper()
	list := smi(v.t, v.h, v.bin, "-L")
	for i, g := range v.gpus {
		if want := fmt.Sprintf("GPU %d: %s (UUID: %s)", i, g.Name, g.UUID); !strings.Contains(list, want) {
			v.t.Errorf("-L lacks %q:\n%s", want, list)
		}
		for _, m := range g.MIG {
			if !strings.Contains(list, "(UUID: "+m+")") {
				v.t.Errorf("-L lacks MIG %s:\n%s", m, list)
			}
		}
	}
}

// queryGPU: --query-gpu gives each GPU's name and memory as the profile and gpuinfo do, and
// utilisation N/A exactly in MIG mode.
func (v smiView) queryGPU() {
	v.t.Helper()
	rows, err := nvsmi.ParseCSV([]byte(smi(v.t, v.h, v.bin, "--query-gpu=name,memory.total,memory.used,utilization.gpu", "--format=csv")))
	if err != nil || len(rows) != len(v.gpus) {
		v.t.Fatalf("--query-gpu: %d rows (%v), want %d", len(rows), err, len(v.gpus))
	}
	for i, g := range v.gpus {
		total, _ := nvsmi.MiB(rows[i]["memory.total"])
		used, _ := nvsmi.MiB(rows[i]["memory.used"])
		if rows[i]["name"] != g.Name || total != g.MemoryMiB || used != uint64(v.inf.Devices[i].Used) {
			v.t.Errorf("--query-gpu GPU %d: %v; want %s, %d MiB total, %d MiB used", i, rows[i], g.Name, g.MemoryMiB, v.inf.Devices[i].Used)
		}
		util := rows[i]["utilization.gpu"]
		if migMode := len(g.MIG) > 0; migMode != (util == "[N/A]") {
			v.t.Errorf("--query-gpu GPU %d: utilization %q (MIG mode %v: N/A exactly in MIG mode, as on an A100)", i, util, migMode)
		}
	}
}

// computeApps: --query-compute-apps lists the holder alone, on GPU 0 (or its first MIG instance),
// with what fakegpu charged it.
func (v smiView) computeApps() {
	v.t.Helper()
	apps, err := nvsmi.ParseCSV([]byte(smi(v.t, v.h, v.bin, "--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv")))
	if err != nil || len(apps) != 1 {
		v.t.Fatalf("--query-compute-apps: %v (%v), want the holder alone", apps, err)
	}
	if used, _ := nvsmi.MiB(apps[0]["used_gpu_memory"]); apps[0]["pid"] != strconv.Itoa(v.holder.PID) ||
		used != uint64(v.held()) || apps[0]["gpu_uuid"] != v.gpus[0].UUID || !strings.HasSuffix(apps[0]["process_name"], "cudaprobe") {
		v.t.Errorf("--query-compute-apps: %v; want pid %d, cudaprobe, %d MiB on %s", apps[0], v.holder.PID, v.held(), v.gpus[0].UUID)
	}
}

// screen: the default screen has the header, each GPU's and MIG instance's memory and the
// holder's row.
func (v smiView) screen() {
	v.t.Helper()
	screen := smi(v.t, v.h, v.bin)
	if !regexp.MustCompile(`NVIDIA-SMI \d+\.\d+`).MatchString(screen) {
		v.t.Errorf("default screen has no header:\n%s", screen)
	}
	for i, g := range v.gpus {
		// nvidia-smi 535 cuts a memory column that does not fit ("1518MiB / 14377..." for an H200).
		total := strconv.FormatUint(g.MemoryMiB, 10)
		want := fmt.Sprintf(`\b%dMiB /\s*(%sMiB\b|%s\.\.\.)`, v.inf.Devices[i].Used, total, total[:min(len(total), 5)])
		if !regexp.MustCompile(want).MatchString(screen) {
			v.t.Errorf("default screen lacks GPU %d's %q:\n%s", i, want, screen)
		}
		for _, m := range v.inf.Devices[i].MIG {
			// "|  0    7   0   0  |   1300MiB /  4864MiB  |": GPU, GI, CI, MIG device, then memory
			want := fmt.Sprintf(`\|\s+%d\s+%d\s+\d+\s+\d+\s+\|\s+%dMiB /\s*%dMiB`, i, m.GI, m.Used, m.Total)
			if !regexp.MustCompile(want).MatchString(screen) {
				v.t.Errorf("default screen lacks MIG instance %d/%d (%q):\n%s", i, m.GI, want, screen)
			}
		}
	}
	if want := fmt.Sprintf(`\b%d\s+C\s+\S*cudaprobe\s+%dMiB`, v.holder.PID, v.held()); !regexp.MustCompile(want).MatchString(screen) {
		v.t.Errorf("default screen lacks the holder's process row %q:\n%s", want, screen)
	}
}

// query: -q has each GPU's name, UUID and memory, and the holder.
func (v smiView) query() {
	v.t.Helper()
	q := smi(v.t, v.h, v.bin, "-q")
	for i, g := range v.gpus {
		for _, want := range []string{`Product Name\s+: ` + regexp.QuoteMeta(g.Name), `GPU UUID\s+: ` + g.UUID,
			fmt.Sprintf(`FB Memory Usage\s+Total\s+: %d MiB\s+Reserved\s+: \d+ MiB\s+Used\s+: %d MiB`, g.MemoryMiB, v.inf.Devices[i].Used)} {
			if !regexp.MustCompile(want).MatchString(q) {
				v.t.Errorf("-q lacks %q", want)
			}
		}
	}
	if want := fmt.Sprintf(`Process ID\s+: %d\s+Type\s+: C\s+Name\s+: \S*cudaprobe\s+Used GPU Memory\s+: %d MiB`, v.holder.PID, v.held()); !regexp.MustCompile(want).MatchString(q) {
		v.t.Errorf("-q lacks the holder %q:\n%s", want, q)
	}
}

// TestRealNvidiaSMIRefusedWithoutExportTable: the check nvidia-smi makes first. Without the
// internal export table (FAKEGPU_NVML_ERROR makes fakegpu refuse it) it refuses the library with
// the message it printed for every fakegpu profile before fakegpu answered it.
func TestRealNvidiaSMIRefusedWithoutExportTable(t *testing.T) {
	bin := smiBinary(t)
	h := fakegputest.NewHost(t, "a16-16q", "FAKEGPU_NVML_ERROR=nvmlInternalGetExportTable:NVML_ERROR_NOT_SUPPORTED")
	c := exec.Command(bin)
	c.Env = h.Env
	out, err := c.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Mismatch in versions between nvidia-smi and NVML") {
		t.Fatalf("nvidia-smi without the export table: %v\n%s", err, out)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	return fakegputest.NewHost(t, "a16-16q").Paths.Root
}
