package fakegpu_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/harness/nvsmi"
	"github.com/limitbed/limitbed/internal/tier"
)

// smi runs Debian's nvidia-smi (extracted, never installed: harness/nvsmi) against h's fakegpu.
func (h *host) smi(bin string, args ...string) string {
	h.t.Helper()
	c := exec.Command(bin, args...)
	c.Env = h.env
	out, err := c.CombinedOutput()
	if err != nil {
		h.t.Fatalf("nvidia-smi %s: %v\n%s", strings.Join(args, " "), err, out)
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
			h := newHost(t, name)
			_, holder := h.hold("--mib", "1000")
			inf := h.info()
			if len(inf.Devices) != len(gpus) {
				t.Fatalf("gpuinfo sees %d GPUs, the profile has %d", len(inf.Devices), len(gpus))
			}

			list := h.smi(bin, "-L")
			for i, g := range gpus {
				if want := fmt.Sprintf("GPU %d: %s (UUID: %s)", i, g.Name, g.UUID); !strings.Contains(list, want) {
					t.Errorf("-L lacks %q:\n%s", want, list)
				}
				for _, m := range g.MIG {
					if !strings.Contains(list, "(UUID: "+m+")") {
						t.Errorf("-L lacks MIG %s:\n%s", m, list)
					}
				}
			}

			rows, err := nvsmi.ParseCSV([]byte(h.smi(bin, "--query-gpu=name,memory.total,memory.used,utilization.gpu", "--format=csv")))
			if err != nil || len(rows) != len(gpus) {
				t.Fatalf("--query-gpu: %d rows (%v), want %d", len(rows), err, len(gpus))
			}
			for i, g := range gpus {
				total, _ := nvsmi.MiB(rows[i]["memory.total"])
				used, _ := nvsmi.MiB(rows[i]["memory.used"])
				if rows[i]["name"] != g.Name || total != g.MemoryMiB || used != uint64(inf.Devices[i].Used) {
					t.Errorf("--query-gpu GPU %d: %v; want %s, %d MiB total, %d MiB used", i, rows[i], g.Name, g.MemoryMiB, inf.Devices[i].Used)
				}
				util := rows[i]["utilization.gpu"]
				if migMode := len(g.MIG) > 0; migMode != (util == "[N/A]") {
					t.Errorf("--query-gpu GPU %d: utilization %q (MIG mode %v: N/A exactly in MIG mode, as on an A100)", i, util, migMode)
				}
			}

			// The holder: on GPU 0 (or its first MIG instance), with what fakegpu charged it.
			held := inf.Devices[0].Used
			apps, err := nvsmi.ParseCSV([]byte(h.smi(bin, "--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv")))
			if err != nil || len(apps) != 1 {
				t.Fatalf("--query-compute-apps: %v (%v), want the holder alone", apps, err)
			}
			if used, _ := nvsmi.MiB(apps[0]["used_gpu_memory"]); apps[0]["pid"] != strconv.Itoa(holder.PID) ||
				used != uint64(held) || apps[0]["gpu_uuid"] != gpus[0].UUID || !strings.HasSuffix(apps[0]["process_name"], "cudaprobe") {
				t.Errorf("--query-compute-apps: %v; want pid %d, cudaprobe, %d MiB on %s", apps[0], holder.PID, held, gpus[0].UUID)
			}

			screen := h.smi(bin)
			if !regexp.MustCompile(`NVIDIA-SMI \d+\.\d+`).MatchString(screen) {
				t.Errorf("default screen has no header:\n%s", screen)
			}
			for i, g := range gpus {
				if want := fmt.Sprintf(`\b%dMiB /\s*%dMiB\b`, inf.Devices[i].Used, g.MemoryMiB); !regexp.MustCompile(want).MatchString(screen) {
					t.Errorf("default screen lacks GPU %d's %q:\n%s", i, want, screen)
				}
				for _, m := range inf.Devices[i].MIG {
					// "|  0    7   0   0  |   1300MiB /  4864MiB  |": GPU, GI, CI, MIG device, then memory
					want := fmt.Sprintf(`\|\s+%d\s+%d\s+\d+\s+\d+\s+\|\s+%dMiB /\s*%dMiB`, i, m.GI, m.Used, m.Total)
					if !regexp.MustCompile(want).MatchString(screen) {
						t.Errorf("default screen lacks MIG instance %d/%d (%q):\n%s", i, m.GI, want, screen)
					}
				}
			}
			if want := fmt.Sprintf(`\b%d\s+C\s+\S*cudaprobe\s+%dMiB`, holder.PID, held); !regexp.MustCompile(want).MatchString(screen) {
				t.Errorf("default screen lacks the holder's process row %q:\n%s", want, screen)
			}

			q := h.smi(bin, "-q")
			for i, g := range gpus {
				for _, want := range []string{`Product Name\s+: ` + regexp.QuoteMeta(g.Name), `GPU UUID\s+: ` + g.UUID,
					fmt.Sprintf(`FB Memory Usage\s+Total\s+: %d MiB\s+Reserved\s+: \d+ MiB\s+Used\s+: %d MiB`, g.MemoryMiB, inf.Devices[i].Used)} {
					if !regexp.MustCompile(want).MatchString(q) {
						t.Errorf("-q lacks %q", want)
					}
				}
			}
			if want := fmt.Sprintf(`Process ID\s+: %d\s+Type\s+: C\s+Name\s+: \S*cudaprobe\s+Used GPU Memory\s+: %d MiB`, holder.PID, held); !regexp.MustCompile(want).MatchString(q) {
				t.Errorf("-q lacks the holder %q:\n%s", want, q)
			}
		})
	}
}

// TestRealNvidiaSMIRefusedWithoutExportTable: the check nvidia-smi makes first. Without the
// internal export table (FAKEGPU_NVML_ERROR makes fakegpu refuse it) it refuses the library with
// the message it printed for every fakegpu profile before fakegpu answered it.
func TestRealNvidiaSMIRefusedWithoutExportTable(t *testing.T) {
	bin := smiBinary(t)
	h := newHost(t, "a16-16q", "FAKEGPU_NVML_ERROR=nvmlInternalGetExportTable:NVML_ERROR_NOT_SUPPORTED")
	c := exec.Command(bin)
	c.Env = h.env
	out, err := c.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Mismatch in versions between nvidia-smi and NVML") {
		t.Fatalf("nvidia-smi without the export table: %v\n%s", err, out)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	return newHost(t, "a16-16q").paths.Root
}
