package metricname

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// names are every constant of the package: the metrics the node's agents export.
var names = []string{
	MemoryLimit, CoreLimit, MemoryUsed, MemoryLive, Processes, RegionDeadSlots, RegionOverflow,
	RegionMemoryLimit, RegionErrors, RegionFileRejected, Removed,
	DriverMemory, DriverMemoryBound, DriverMemoryOverLimit, DriverProcesses, DriverProcessMemory,
	DriverUnattributed, DriverKills, DriverErrors, DriverLastPass,
	SchedulerGPUSeconds, SchedulerSlices, SchedulerMaxWait, SchedulerSwitches, SchedulerOverlaps,
	SchedulerOwedIdle, SchedulerSpeed, SchedulerSMClock, SchedulerFullLoadClock, SchedulerCalibrations,
}

// metricRef is a metric name, or a grep pattern's prefix of names: PREFIX(alt|alt...).
var metricRef = regexp.MustCompile(`\b((?:hami|vgpu_scheduler)_[a-z0-9_]*)(?:\(([a-z0-9_|]+)\))?`)

// refs returns every metric name, or start of names, that a script's text spells.
func refs(text string) []string {
	var out []string
	for _, m := range metricRef.FindAllStringSubmatch(text, -1) {
		if m[2] == "" {
			out = append(out, m[1])
			continue
		}
		for _, alt := range strings.Split(m[2], "|") {
			out = append(out, m[1]+alt)
		}
	}
	return out
}

func TestRefs(t *testing.T) {
	got := refs(`grep -E '^vgpu_scheduler_(gpu_speed|container_gpu_seconds)' | grep hami_container_processes`)
	want := []string{"vgpu_scheduler_gpu_speed", "vgpu_scheduler_container_gpu_seconds", "hami_container_processes"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("refs = %v, want %v", got, want)
	}
}

// TestScriptsSpellOnlyTheseNames holds the scripts that read an agent's /metrics by hand
// (harness/gpu/sched_cases.sh greps the scheduler's) to this package: every name or pattern they spell
// starts a metric named here, so a renamed metric fails here, not on a GPU machine.
func TestScriptsSpellOnlyTheseNames(t *testing.T) {
	scripts, err := filepath.Glob(filepath.Join("..", "..", "..", "scripts", "*.sh"))
	for _, dir := range [][]string{{"harness", "gpu"}, {"harness", "gpu", "sections"}} {
		more, _ := filepath.Glob(filepath.Join(append([]string{"..", "..", ".."}, append(dir, "*.sh")...)...))
		scripts = append(scripts, more...)
	}
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts found: %v", err)
	}
	seen := 0
	for _, path := range scripts {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range refs(string(text)) {
			seen++
			found := false
			for _, n := range names {
				found = found || strings.HasPrefix(n, ref)
			}
			if !found {
				t.Errorf("%s spells %q, which starts no metric of plugin/monitor/metricname", filepath.Base(path), ref)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no script spells a metric name: the GPU check's scheduler section no longer reads the metrics, or this test no longer finds them")
	}
}
