package monitor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/identity"
	"github.com/limitbed/limitbed/plugin/monitor/metricname"
)

// descHelp is a description's help text.
func descHelp(d *prometheus.Desc) string {
	s := d.String()
	i := strings.Index(s, `help: "`)
	j := strings.Index(s, `", unit: "`)
	if j < 0 {
		j = strings.Index(s, `", constLabels`)
	}
	return s[i+len(`help: "`) : j]
}

// The kill path against a /proc of the test's own (the real processes' cases are in
// killpath_real_test.go): the monitor acts only on the process the driver listed.

var tenantKey = identity.Key{PodUID: uidT, Container: "main"}

// An offender is judged and killed; the driver still lists its PID with its memory (a real
// driver's record outlives the process while the context is torn down, or while a descriptor of
// it lives on elsewhere), and, before the next period, a process of the neighbour takes the PID.
// The neighbour must not be charged with the offender's memory, and its process must never be
// signalled. Before: the neighbour was judged over (1300 + 4396 MiB > 2000 MiB + 2 × 1 GiB) and
// its new process SIGKILLed. Variants: the PID is taken while the list is being read (no period
// between); the PID was already free when the monitor first read it; another process of the
// offender's own container takes it (the container is judged, the new process never signalled).
func TestAccountingNeverKillsAReusedPID(t *testing.T) {
	listed := map[string][]gpu.Process{gpuA: {honest, bypass, neighbour}}
	t.Run("a neighbour's process takes the PID after the kill", func(t *testing.T) {
		f := newAccounting(t, v1.EnforcementKill)
		f.driver.set(listed)
		if rep := f.pass(t); len(rep.Killed) != 1 || rep.Killed[0].PID != 101 {
			t.Fatalf("first period: killed %+v, want the bypass", rep.Killed)
		}
		fakeProc(t, f.a.ProcRoot, 101, 9, 2000, cidN) // the neighbour's new process, PID 101
		rep := f.pass(t)                              // the driver still lists 101 with the bypass's memory
		wantInnocentSpared(t, f, rep, 1)
		f.pass(t) // still listed: counted once
		want := `
# HELP hami_monitor_driver_pid_changed_total ` + descHelp(descDriverChanged) + `
# TYPE hami_monitor_driver_pid_changed_total counter
hami_monitor_driver_pid_changed_total{at="attribution"} 1
hami_monitor_driver_pid_changed_total{at="kill"} 0
# HELP hami_node_driver_unattributed_memory_bytes ` + descHelp(descUnattributed) + `
# TYPE hami_node_driver_unattributed_memory_bytes gauge
hami_node_driver_unattributed_memory_bytes{gpu_uuid="` + gpuA + `"} 4.609540096e+09
`
		if err := testutil.CollectAndCompare(&DriverCollector{Accounting: f.a}, strings.NewReader(want),
			metricname.DriverPIDChanged, metricname.DriverUnattributed); err != nil {
			t.Error(err)
		}
	})
	t.Run("the PID is taken while the list is read", func(t *testing.T) {
		for _, start := range []uint64{5000, 5001} { // in the list's clock tick, after it
			f := newAccounting(t, v1.EnforcementKill)
			f.a.Boottime = func() time.Duration { return 50 * time.Second } // tick 5000
			f.driver.set(listed)
			f.driver.onList = func(n int) []gpu.DeviceProcesses {
				if n == 0 { // the bypass ends once listed, and the neighbour's new process takes 101
					fakeProc(t, f.a.ProcRoot, 101, 9, start, cidN)
					return nil
				}
				return deviceLists(map[string][]gpu.Process{gpuA: {honest, neighbour}}) // listed again: 101 is gone
			}
			rep := f.pass(t)
			wantInnocentSpared(t, f, rep, 0)
			if want := map[uint64]int{5000: 2, 5001: 1}[start]; f.driver.calls != want {
				t.Errorf("start %d: the driver was asked %d times, want %d", start, f.driver.calls, want)
			}
		}
	})
	t.Run("the PID was free when first read, then taken", func(t *testing.T) {
		f := newAccounting(t, v1.EnforcementKill)
		if err := os.RemoveAll(filepath.Join(f.a.ProcRoot, "101")); err != nil {
			t.Fatal(err)
		}
		f.driver.set(listed)
		if rep := f.pass(t); len(rep.Killed) != 0 || len(rep.Changed) != 0 {
			t.Fatalf("a listed process already gone: killed %+v, changed %+v", rep.Killed, rep.Changed)
		}
		fakeProc(t, f.a.ProcRoot, 101, 9, 2000, cidN)
		wantInnocentSpared(t, f, f.pass(t), 0)
	})
	t.Run("a process of the same container takes the PID", func(t *testing.T) {
		f := newAccounting(t, v1.EnforcementKill)
		f.driver.set(listed)
		f.pass(t)
		fakeProc(t, f.a.ProcRoot, 101, 9, 2000, cidT)
		rep := f.pass(t)
		u := usageOf(rep, uidT)
		if u == nil || !u.Over || u.Offender == nil || u.Offender.PID != 101 || !u.Offender.Changed {
			t.Fatalf("the tenant with 101 changed: %+v", u)
		}
		if len(rep.Killed) != 0 || len(f.killer.kills) != 1 {
			t.Errorf("killed %+v (all kills %+v): the changed process must not be signalled", rep.Killed, f.killer.kills)
		}
		if got := f.a.changedCounts(); got[ChangedAtAttribution] != 1 || got[ChangedAtKill] != 1 {
			t.Errorf("counted %v", got)
		}
	})
}

// wantInnocentSpared: PID 101 is the neighbour's now; the neighbour is within its limit, 101 is
// reported as changed, and the only kill is the first period's (kills).
func wantInnocentSpared(t *testing.T, f *accountingFixture, rep *Report, kills int) {
	t.Helper()
	if n := usageOf(rep, uidN); n == nil || n.Over || len(n.Processes) != 1 {
		t.Errorf("the neighbour charged with the offender's memory: %+v", n)
	}
	for _, k := range f.killer.kills {
		if k.key != tenantKey {
			t.Errorf("killed %+v: a process of the neighbour", k)
		}
	}
	if len(f.killer.kills) != kills {
		t.Errorf("kills %+v, want %d", f.killer.kills, kills)
	}
	if len(rep.Changed) != 1 || rep.Changed[0].PID != 101 || rep.Changed[0].UsedBytes != bypass.UsedBytes {
		t.Errorf("changed %+v, want 101 with the bypass's memory", rep.Changed)
	}
	if countPrefix(f.events.got, ReasonOverLimit+": process 101") > 1 {
		t.Errorf("events %q", f.events.got)
	}
	for _, e := range f.events.got {
		if strings.Contains(e, "pod-22") {
			t.Errorf("an Event on the neighbour: %q", e)
		}
	}
}

// zombieMain makes process pid's main thread a zombie in the test's /proc whose other thread runs
// in container cid, with the cgroup files cgroup v1 shows then.
func zombieMain(t *testing.T, root string, pid int, start uint64, cid string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	stat := func(p int, state string, flags int) string {
		return fmt.Sprintf("%d (proc) %s 0 0 0 0 0 %d%s %d 0\n", p, state, flags, strings.Repeat(" 0", 12), start)
	}
	files := map[string]string{
		"stat":                                    stat(pid, "Z", 0x400044),
		"cgroup":                                  "4:memory:/\n0::/\n",
		"task/" + strconv.Itoa(pid) + "/stat":     stat(pid, "Z", 0x400044),
		"task/" + strconv.Itoa(pid) + "/cgroup":   "4:memory:/\n0::/\n",
		"task/" + strconv.Itoa(pid+1) + "/stat":   stat(pid+1, "S", 0x400040),
		"task/" + strconv.Itoa(pid+1) + "/cgroup": "4:memory:/docker/" + cid + "\n0::/\n",
	}
	for name, data := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A bypass whose main thread has exited while another thread holds its memory, on cgroup v1: it is
// the tenant's, found over and killed like any other. Before: read as a host process (the exited
// main thread's cgroup file names the root), reported and never killed.
func TestAccountingMainThreadExited(t *testing.T) {
	f := newAccounting(t, v1.EnforcementKill)
	zombieMain(t, f.a.ProcRoot, 101, 1001, cidT)
	f.driver.set(map[string][]gpu.Process{gpuA: {honest, bypass, neighbour}})
	rep := f.pass(t)
	if u := usageOf(rep, uidT); u == nil || !u.Over || u.Offender == nil || u.Offender.PID != 101 {
		t.Fatalf("the tenant: %+v (unattributed %+v)", u, rep.Unattributed)
	}
	if len(f.killer.kills) != 1 || f.killer.kills[0] != (recordedKill{101, tenantKey}) {
		t.Errorf("kills %+v, want the bypass", f.killer.kills)
	}
}
