package monitor

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/monitor/metricname"
	"github.com/limitbed/limitbed/plugin/schedproto"
)

// fakeBusy is the driver's per-process samples as the test sets them.
type fakeBusy struct {
	mu    sync.Mutex
	procs []gpu.ProcessBusy
	err   error
}

func (b *fakeBusy) Busy() ([]gpu.DeviceBusy, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return []gpu.DeviceBusy{{UUID: gpuA, Processes: b.procs}, {UUID: gpuB}}, b.err
}

// schedEntry is how the test plays the scheduler for one container's entry on GPU-A each second.
type schedEntry struct {
	state   schedproto.State
	allowed time.Duration // per second
	stamped bool          // the scheduler keeps allowed_us (else: an older scheduler)
	silent  bool          // the scheduler stopped beating
}

// grantNode writes each container's grant file (GPU-A) and plays the scheduler on it.
type grantNode struct {
	dir   string
	files map[string]*schedproto.GrantFile
	total map[string]time.Duration
}

func newGrantNode(t *testing.T, uids ...string) *grantNode {
	t.Helper()
	g := &grantNode{dir: t.TempDir(), files: map[string]*schedproto.GrantFile{}, total: map[string]time.Duration{}}
	u, err := schedproto.ParseUUID(gpuA)
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range uids {
		b, err := schedproto.GrantSpec{GPUs: []schedproto.UUID{u}}.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(g.dir, uid+"_main.grant")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := schedproto.OpenGrant(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		g.files[uid] = f
	}
	return g
}

// second plays one second of the scheduler.
func (g *grantNode) second(es map[string]schedEntry) {
	for uid, e := range es {
		f := g.files[uid]
		if seq, st := f.Load(0); st != e.state || seq == 0 {
			f.Set(0, e.state, 1, 0)
		}
		if e.silent {
			continue
		}
		g.total[uid] += e.allowed
		for range 100 { // a beat every 10 ms
			if e.stamped {
				f.BeatAllowed(0, g.total[uid])
			} else {
				f.Beat(0)
			}
		}
	}
}

// The processes hold little memory: the memory accounting finds nobody over.
var lightProcs = map[string][]gpu.Process{gpuA: {{PID: 100, UsedBytes: 400 * mib}, {PID: 101, UsedBytes: 400 * mib},
	{PID: 200, UsedBytes: 400 * mib}, {PID: 300, UsedBytes: 400 * mib}, {PID: 400, UsedBytes: 400 * mib}}}

var (
	honestBusy = func(s float64) gpu.ProcessBusy { return gpu.ProcessBusy{PID: 100, Share: s, Samples: 1} }
	bypassBusy = func(s float64) gpu.ProcessBusy { return gpu.ProcessBusy{PID: 101, Share: s, Samples: 1} }
)

// The compute check on the scheduler's figures and the driver's samples, pass by pass (the first
// pass is the baseline): a container allowed nothing whose processes work is outside its slices
// at once; one that was allowed time when it works beyond it plus the margin in two passes
// running, never for one pass alone; one the scheduler does not drive, or drives without
// allowed_us, or has stopped beating, is not judged; a host process and an unknown container's
// are never attributed; with kill, only the offenders go, reported once per episode.
func TestComputeCheck(t *testing.T) {
	run, wait, free := schedproto.Run, schedproto.Wait, schedproto.Free
	neighbourOK := schedEntry{run, 500 * time.Millisecond, true, false}
	for _, tc := range []struct {
		name      string
		tenant    schedEntry
		noGrant   bool // the tenant has no grant file: not driven
		busy      []gpu.ProcessBusy
		only      int // the busy processes are sampled in this pass alone (else in every pass)
		busyErr   error
		judged    bool
		outsideAt []int // passes that find the tenant outside
		killed    []int // with kill, each pass it is outside
		errorsAt  string
	}{
		{"never allowed, a bypass busy 0.75", schedEntry{wait, 0, true, false}, false,
			[]gpu.ProcessBusy{bypassBusy(0.75)}, 0, nil, true, []int{2, 3}, []int{101}, ""},
		{"never allowed, barely busy", schedEntry{wait, 0, true, false}, false,
			[]gpu.ProcessBusy{bypassBusy(0.04)}, 0, nil, true, nil, nil, ""},
		{"never allowed, two processes busy", schedEntry{wait, 0, true, false}, false,
			[]gpu.ProcessBusy{honestBusy(0.2), bypassBusy(0.3)}, 0, nil, true, []int{2, 3}, []int{101, 100}, ""},
		{"within its slices", schedEntry{run, 300 * time.Millisecond, true, false}, false,
			[]gpu.ProcessBusy{honestBusy(0.3)}, 0, nil, true, nil, nil, ""},
		{"within the margin", schedEntry{run, 300 * time.Millisecond, true, false}, false,
			[]gpu.ProcessBusy{honestBusy(0.49)}, 0, nil, true, nil, nil, ""},
		{"beyond the margin for one pass", schedEntry{run, 300 * time.Millisecond, true, false}, false,
			[]gpu.ProcessBusy{honestBusy(0.9)}, 2, nil, true, nil, nil, ""},
		{"its slices and a bypass beside", schedEntry{run, 300 * time.Millisecond, true, false}, false,
			[]gpu.ProcessBusy{honestBusy(0.3), bypassBusy(0.35)}, 0, nil, true, []int{3}, []int{101}, ""},
		{"free: all of it", schedEntry{free, time.Second, true, false}, false,
			[]gpu.ProcessBusy{honestBusy(0.6), bypassBusy(0.4)}, 0, nil, true, nil, nil, ""},
		{"not driven: no grant file", schedEntry{}, true,
			[]gpu.ProcessBusy{bypassBusy(0.9)}, 0, nil, false, nil, nil, ""},
		{"driven off", schedEntry{schedproto.Off, 0, true, false}, false,
			[]gpu.ProcessBusy{bypassBusy(0.9)}, 0, nil, false, nil, nil, ""},
		{"an older scheduler: no allowed time", schedEntry{wait, 0, false, false}, false,
			[]gpu.ProcessBusy{bypassBusy(0.9)}, 0, nil, false, nil, nil, ""},
		{"a scheduler that stopped", schedEntry{wait, 0, true, true}, false,
			[]gpu.ProcessBusy{bypassBusy(0.9)}, 0, nil, false, nil, nil, ""},
		{"the samples unreadable", schedEntry{wait, 0, true, false}, false,
			[]gpu.ProcessBusy{bypassBusy(0.9)}, 0, errors.New("nvml: unknown error"), false, nil, nil, "driver utilisation"},
		{"a host process and an unknown container's", schedEntry{wait, 0, true, false}, false,
			[]gpu.ProcessBusy{{PID: 300, Share: 0.5, Samples: 1}, {PID: 400, Share: 0.4, Samples: 1}}, 0, nil, true, nil, nil, ""},
		// A sample of a PID the driver's list of the GPU does not hold (a real driver samples a
		// process for a while after it ended; its PID may name another process by now).
		{"a sampled PID the driver does not list", schedEntry{wait, 0, true, false}, false,
			[]gpu.ProcessBusy{{PID: 102, Share: 0.9, Samples: 1}}, 0, nil, true, nil, nil, ""},
	} {
		for _, enf := range []v1.Enforcement{v1.EnforcementReport, v1.EnforcementKill} {
			t.Run(tc.name+"/"+string(enf), func(t *testing.T) {
				f := newAccounting(t, enf)
				fakeProc(t, f.a.ProcRoot, 102, 9, 1005, cidT) // the tenant's, never listed by the driver
				f.driver.set(lightProcs)
				uids := []string{uidN}
				if !tc.noGrant {
					uids = append(uids, uidT)
				}
				g := newGrantNode(t, uids...)
				busy := &fakeBusy{err: tc.busyErr}
				f.a.Busy, f.a.GrantDir = busy, g.dir
				var outsideAt []int
				for pass := 1; pass <= 3; pass++ {
					es := map[string]schedEntry{uidN: neighbourOK}
					if !tc.noGrant {
						es[uidT] = tc.tenant
					}
					g.second(es)
					procs := tc.busy
					if tc.only != 0 && pass != tc.only {
						procs = []gpu.ProcessBusy{honestBusy(0.3)}
					}
					busy.mu.Lock()
					busy.procs = append(append([]gpu.ProcessBusy(nil), procs...), gpu.ProcessBusy{PID: 200, Share: 0.25, Samples: 1})
					busy.mu.Unlock()
					rep := f.pass(t)
					if n := computeUsageOf(rep, uidN); pass > 1 && tc.busyErr == nil && (n == nil || n.Outside) {
						t.Fatalf("pass %d: the neighbour %+v, want judged within", pass, n)
					}
					u := computeUsageOf(rep, uidT)
					if pass == 1 && u != nil {
						t.Fatalf("the first pass judged %+v: it has no baseline", u)
					}
					if pass > 1 && (u != nil) != tc.judged {
						t.Fatalf("pass %d: judged %+v, want judged %v (errors %q)", pass, u, tc.judged, rep.Errors)
					}
					if u != nil && u.Outside {
						outsideAt = append(outsideAt, pass)
					}
					if tc.errorsAt != "" && !slices.ContainsFunc(rep.Errors, func(e string) bool { return strings.Contains(e, tc.errorsAt) }) {
						t.Errorf("pass %d: errors %q, want one about %s", pass, rep.Errors, tc.errorsAt)
					}
				}
				if !slices.Equal(outsideAt, tc.outsideAt) {
					t.Errorf("outside at passes %v, want %v", outsideAt, tc.outsideAt)
				}
				var killed []int
				for _, k := range f.killer.kills {
					killed = append(killed, k.pid)
				}
				var want []int
				if enf == v1.EnforcementKill {
					// The samples do not change after a fake kill: each pass finds the same offenders.
					for range tc.outsideAt {
						want = append(want, tc.killed...)
					}
				}
				if !slices.Equal(killed, want) {
					t.Errorf("killed %v, want %v", killed, want)
				}
				reported := countPrefix(f.events.got, ReasonComputeOutside+": ")
				if wantReported := min(len(tc.outsideAt), 1); reported != wantReported {
					t.Errorf("%d %s events, want %d (one per episode): %q", reported, ReasonComputeOutside, wantReported, f.events.got)
				}
				if got := countPrefix(f.events.got, ReasonComputeOutsideKilled+": "); got != len(want) {
					t.Errorf("%d %s events, want %d", got, ReasonComputeOutsideKilled, len(want))
				}
			})
		}
	}
}

func computeUsageOf(rep *Report, uid string) *ComputeUsage {
	for i := range rep.Compute {
		if string(rep.Compute[i].Container.PodUID) == uid {
			return &rep.Compute[i]
		}
	}
	return nil
}

// The Event names the figures, the offender and the likely cause; a garbage grant file is an
// error of the pass, and the other containers are still judged.
func TestComputeCheckEventAndBadGrant(t *testing.T) {
	f := newAccounting(t, v1.EnforcementReport)
	f.driver.set(lightProcs)
	g := newGrantNode(t, uidT, uidN)
	if err := os.WriteFile(filepath.Join(g.dir, "33333333-0000-4000-8000-000000000003_main.grant"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.a.Busy, f.a.GrantDir = &fakeBusy{procs: []gpu.ProcessBusy{bypassBusy(0.75), {PID: 200, Share: 0.25, Samples: 1}}}, g.dir
	var rep *Report
	for range 2 {
		g.second(map[string]schedEntry{uidT: {schedproto.Wait, 0, true, false}, uidN: {schedproto.Run, 500 * time.Millisecond, true, false}})
		rep = f.pass(t)
	}
	if u := computeUsageOf(rep, uidT); u == nil || !u.Outside || u.Busy != 0.75 || u.Allowed != 0 || len(u.Offenders) != 1 {
		t.Fatalf("tenant: %+v", u)
	}
	if n := computeUsageOf(rep, uidN); n == nil || n.Outside || n.Allowed < 0.49 || n.Allowed > 0.51 {
		t.Fatalf("neighbour: %+v", n)
	}
	if !slices.ContainsFunc(rep.Errors, func(e string) bool { return strings.Contains(e, "33333333") }) {
		t.Errorf("errors %q, want the garbage grant file named", rep.Errors)
	}
	if len(f.events.got) != 1 {
		t.Fatalf("events %q", f.events.got)
	}
	for _, want := range []string{ReasonComputeOutside + ": container main was busy 0.75 of GPU " + gpuA, "allowed it 0.00",
		"margin 0.20", "by 101 (8 in its container) busy 0.75", "Likely cause:"} {
		if !strings.Contains(f.events.got[0], want) {
			t.Errorf("event %q lacks %q", f.events.got[0], want)
		}
	}
	t.Log(f.events.got[0])
}

// The compute check's figures are exported per container and GPU, and its kills per container.
func TestComputeCollector(t *testing.T) {
	f := newAccounting(t, v1.EnforcementKill)
	f.driver.set(lightProcs)
	g := newGrantNode(t, uidT, uidN)
	f.a.Busy, f.a.GrantDir = &fakeBusy{procs: []gpu.ProcessBusy{bypassBusy(0.75), {PID: 200, Share: 0.25, Samples: 1}}}, g.dir
	for range 2 {
		g.second(map[string]schedEntry{uidT: {schedproto.Wait, 0, true, false}, uidN: {schedproto.Run, 500 * time.Millisecond, true, false}})
		f.pass(t)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&ComputeCollector{Accounting: f.a})
	l := func(uid string) string {
		return `{container="main",device_index="0",gpu_uuid="` + gpuA + `",pod_uid="` + uid + `"}`
	}
	want := `
# HELP hami_container_compute_outside_slices 1 when a container's processes were busy on a GPU beyond what the scheduler allowed it (plus the margin), by the driver's samples, else 0.
# TYPE hami_container_compute_outside_slices gauge
hami_container_compute_outside_slices` + l(uidT) + ` 1
hami_container_compute_outside_slices` + l(uidN) + ` 0
# HELP hami_container_driver_busy_ratio A container's processes' share of a GPU over the last accounting pass by the driver's per-process samples (nvmlDeviceGetProcessUtilization), whatever they loaded; only on GPUs the node scheduler drives the container on.
# TYPE hami_container_driver_busy_ratio gauge
hami_container_driver_busy_ratio` + l(uidT) + ` 0.75
hami_container_driver_busy_ratio` + l(uidN) + ` 0.25
# HELP hami_monitor_compute_kills_total Processes the monitor killed (enforcement: kill) for working on a GPU outside their container's slices.
# TYPE hami_monitor_compute_kills_total counter
hami_monitor_compute_kills_total{container="main",pod_uid="` + uidT + `"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metricname.ComputeOutside, metricname.ComputeBusy, metricname.ComputeKills); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(&ComputeCollector{Accounting: f.a}, metricname.ComputeAllowed); n != 2 {
		t.Errorf("%d allowed-share series, want 2", n)
	}
}
