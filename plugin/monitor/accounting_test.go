package monitor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/identity"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/region"
)

const (
	mib     = 1 << 20
	gpuA    = "GPU-aaaaaaaa-0000-4000-8000-00000000000a"
	gpuB    = "GPU-bbbbbbbb-0000-4000-8000-00000000000b"
	uidT    = "11111111-0000-4000-8000-000000000001"
	uidN    = "22222222-0000-4000-8000-000000000002"
	cidT    = "1111111111111111111111111111111111111111111111111111111111111111"
	cidN    = "2222222222222222222222222222222222222222222222222222222222222222"
	nodeCID = "9999999999999999999999999999999999999999999999999999999999999999"
)

// fakeDriver is a driver whose process lists the test sets.
type fakeDriver struct {
	mu    sync.Mutex
	devs  []gpu.DeviceProcesses
	err   error
	calls int
	// onList, when set, runs at each call (n counts from 0) once the list is taken; a non-nil
	// result replaces the list of that call.
	onList func(n int) []gpu.DeviceProcesses
}

func (d *fakeDriver) Processes() ([]gpu.DeviceProcesses, error) {
	d.mu.Lock()
	devs, err, n, hook := d.devs, d.err, d.calls, d.onList
	d.calls++
	d.mu.Unlock()
	if hook != nil {
		if alt := hook(n); alt != nil {
			return alt, err
		}
	}
	return devs, err
}

func (d *fakeDriver) set(procs map[string][]gpu.Process) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.devs = deviceLists(procs)
}

func deviceLists(procs map[string][]gpu.Process) []gpu.DeviceProcesses {
	var devs []gpu.DeviceProcesses
	for _, g := range []string{gpuA, gpuB} {
		devs = append(devs, gpu.DeviceProcesses{UUID: g, Processes: procs[g]})
	}
	return devs
}

// fakeProc writes /proc/<pid>/{stat,cgroup,status} for a process of container cid (as a Docker
// container's cgroup: no pod in it), calling itself nspid.
func fakeProc(t *testing.T, root string, pid, nspid int, start uint64, cid string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (proc) S%s %d 0 0\n", pid, strings.Repeat(" 0", 18), start)
	cg := "0::/\n"
	if cid != "" {
		cg = "4:memory:/docker/" + cid + "\n"
	}
	for name, data := range map[string]string{"stat": stat, "cgroup": cg, "status": fmt.Sprintf("NSpid:\t%d\t%d\n", pid, nspid)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type recordedKill struct {
	pid int
	key identity.Key
}

type fakeKiller struct {
	mu    sync.Mutex
	kills []recordedKill
}

func (k *fakeKiller) Kill(p ProcessUsage, c *identity.Container) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kills = append(k.kills, recordedKill{p.PID, c.Key})
	return nil
}

type fakeEvents struct {
	mu  sync.Mutex
	got []string
}

func (e *fakeEvents) Eventf(_ runtime.Object, _, reason, format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, reason+": "+fmt.Sprintf(format, args...))
}

func gpuContainer(uid, cid string, limitMiB uint64, gpus ...string) *identity.Container {
	c := &identity.Container{Key: identity.Key{PodUID: ptypes(uid), Container: "main"}, ID: cid,
		Pod: identity.Pod{Namespace: "team", Name: "pod-" + uid[:2], UID: ptypes(uid)}, GPUSource: identity.SourceKubelet, Ordered: true,
		Limits: identity.Limits{Source: identity.SourceFile, Memory: []uint64{limitMiB * mib}, Priority: 1}}
	for _, g := range gpus {
		c.GPUs = append(c.GPUs, identity.GPU{UUID: g})
	}
	return c
}

type accountingFixture struct {
	a      *Accounting
	driver *fakeDriver
	killer *fakeKiller
	events *fakeEvents
	now    time.Time
}

// newAccounting: a tenant (3000 MiB on GPU-A) and a neighbour (2000 MiB on GPU-A), 1 GiB allowance.
func newAccounting(t *testing.T, enforcement v1.Enforcement) *accountingFixture {
	root := t.TempDir()
	fakeProc(t, root, 100, 7, 1000, cidT)    // the tenant's honest process
	fakeProc(t, root, 101, 8, 1001, cidT)    // the tenant's bypass
	fakeProc(t, root, 200, 7, 1002, cidN)    // the neighbour
	fakeProc(t, root, 300, 300, 1003, "")    // a host process
	fakeProc(t, root, 400, 1, 1004, nodeCID) // a container the node does not know
	f := &accountingFixture{driver: &fakeDriver{}, killer: &fakeKiller{}, events: &fakeEvents{}, now: time.Unix(5000, 0)}
	ids := staticIdentity{cs: []*identity.Container{gpuContainer(uidT, cidT, 3000, gpuA), gpuContainer(uidN, cidN, 2000, gpuA)}}
	f.a = &Accounting{Driver: f.driver, Identity: ids, Dir: t.TempDir(), ProcRoot: root, ContextAllowance: 1024 * mib,
		Enforcement: enforcement, Killer: f.killer, Events: f.events, Logger: klog.Background(), Now: func() time.Time { return f.now }}
	return f
}

func (f *accountingFixture) pass(t *testing.T) *Report {
	t.Helper()
	f.now = f.now.Add(time.Second)
	rep, err := f.a.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func usageOf(rep *Report, uid string) *ContainerUsage {
	for i := range rep.Usage {
		if string(rep.Usage[i].Container.PodUID) == uid {
			return &rep.Usage[i]
		}
	}
	return nil
}

var (
	honest    = gpu.Process{PID: 100, UsedBytes: 1300 * mib} // 1000 MiB + a 300 MiB context
	bypass    = gpu.Process{PID: 101, UsedBytes: 4396 * mib} // 4096 MiB the library never saw
	neighbour = gpu.Process{PID: 200, UsedBytes: 1300 * mib}
	host      = gpu.Process{PID: 300, UsedBytes: 500 * mib}
	stranger  = gpu.Process{PID: 400, UsedBytes: 9000 * mib}
)

// The tenant's honest process runs first; a bypass joins it. Within one
// period the container is over (1300 + 4396 MiB > 3000 MiB + 2 × 1 GiB) and
// the bypass, whose memory came last, is the offender: reported once (log,
// Event), with kill ended, never the honest process, the neighbour, the
// host's process or one of an unknown container.
func TestAccountingDetectsAndEnforces(t *testing.T) {
	for _, enf := range []v1.Enforcement{v1.EnforcementReport, v1.EnforcementKill} {
		t.Run(string(enf), func(t *testing.T) {
			f := newAccounting(t, enf)
			f.driver.set(map[string][]gpu.Process{gpuA: {honest, neighbour, host, stranger}})
			rep := f.pass(t)
			if u := usageOf(rep, uidT); u == nil || u.Over || !u.Judged || u.BoundBytes != 4024*mib {
				t.Fatalf("honest tenant: %+v", u)
			}
			if len(rep.Unattributed) != 2 || len(f.events.got) != 0 || len(f.killer.kills) != 0 {
				t.Fatalf("unattributed %+v, events %v, kills %v", rep.Unattributed, f.events.got, f.killer.kills)
			}
			f.driver.set(map[string][]gpu.Process{gpuA: {honest, bypass, neighbour, host, stranger}})
			rep = f.pass(t)
			u := usageOf(rep, uidT)
			if u == nil || !u.Over || u.UsedBytes != 5696*mib || u.BoundBytes != 5048*mib || u.Offender == nil || u.Offender.PID != 101 {
				t.Fatalf("tenant with the bypass: %+v", u)
			}
			if n := usageOf(rep, uidN); n == nil || n.Over {
				t.Errorf("neighbour judged over: %+v", n)
			}
			if countPrefix(f.events.got, ReasonOverLimit+": ") != 1 || !strings.HasPrefix(f.events.got[0], ReasonOverLimit+": process 101 (8 in its container) on GPU "+gpuA) {
				t.Errorf("events %q", f.events.got)
			}
			for _, want := range []string{"holds 5696 MiB", "limit 3000 MiB + 2 process(es) × 1024 MiB context allowance = 5048 MiB", "Likely cause:"} {
				if len(f.events.got) > 0 && !strings.Contains(f.events.got[0], want) {
					t.Errorf("event %q lacks %q", f.events.got[0], want)
				}
			}
			wantKills := 0
			if enf == v1.EnforcementKill {
				wantKills = 1
				if len(rep.Killed) != 1 || rep.Killed[0].PID != 101 || f.killer.kills[0] != (recordedKill{101, identity.Key{PodUID: uidT, Container: "main"}}) {
					t.Errorf("killed %+v / %+v, want only the bypass", rep.Killed, f.killer.kills)
				}
			}
			if len(f.killer.kills) != wantKills {
				t.Errorf("kills %+v, want %d", f.killer.kills, wantKills)
			}
			// Still over in the next period (report; or kill not yet effective): no second Event for
			// the same episode; kill tries again, with an Event for each kill.
			f.pass(t)
			if countPrefix(f.events.got, ReasonOverLimit+": ") != 1 || countPrefix(f.events.got, ReasonOverLimitKilled+": ") != len(f.killer.kills) {
				t.Errorf("events after a second period: %q", f.events.got)
			}
			if enf == v1.EnforcementKill && len(f.killer.kills) != 2 {
				t.Errorf("kills %+v", f.killer.kills)
			}
			for _, k := range f.killer.kills {
				if k.pid != 101 {
					t.Errorf("killed %d: only the bypass may be", k.pid)
				}
			}
		})
	}
}

// The offender is the process whose memory came last, even when it holds
// less than the honest one; when every process appeared at once (the
// monitor just started), the one holding most.
func TestAccountingOffenderOrder(t *testing.T) {
	f := newAccounting(t, v1.EnforcementReport)
	f.driver.set(map[string][]gpu.Process{gpuA: {honest, bypass}})
	if u := usageOf(f.pass(t), uidT); u.Offender == nil || u.Offender.PID != 101 {
		t.Fatalf("all seen at once: offender %+v, want the largest (101)", u.Offender)
	}
	// The honest process holds 2500 MiB (under its limit), then a bypass of 2100 MiB joins: the
	// container is over (2800 + 2400 > 5048 MiB) and the bypass, smaller but last, is the offender.
	big := gpu.Process{PID: 100, UsedBytes: 2800 * mib}
	small := gpu.Process{PID: 101, UsedBytes: 2400 * mib}
	f = newAccounting(t, v1.EnforcementReport)
	f.driver.set(map[string][]gpu.Process{gpuA: {big}})
	f.pass(t)
	f.driver.set(map[string][]gpu.Process{gpuA: {big, small}})
	if u := usageOf(f.pass(t), uidT); !u.Over || u.Offender == nil || u.Offender.PID != 101 {
		t.Fatalf("a smaller bypass that came last: %+v", u)
	}
}

// What cannot be judged is not: no identity (every process unattributed), a
// driver that does not answer (an error, nothing judged), a process whose
// memory the driver does not report, and a GPU the container was not given
// (it may hold contexts there, nothing more).
func TestAccountingFailsClosed(t *testing.T) {
	f := newAccounting(t, v1.EnforcementKill)
	f.a.Identity = staticIdentity{err: errors.New("API server down")}
	f.driver.set(map[string][]gpu.Process{gpuA: {honest, bypass}})
	rep := f.pass(t)
	if len(rep.Usage) != 0 || len(rep.Unattributed) != 2 || len(f.killer.kills) != 0 || len(rep.Errors) != 1 {
		t.Errorf("no identity: usage %+v, unattributed %d, kills %v, errors %v", rep.Usage, len(rep.Unattributed), f.killer.kills, rep.Errors)
	}

	f = newAccounting(t, v1.EnforcementKill)
	f.driver.err = errors.New("NVML: driver not loaded")
	if _, err := f.a.Pass(context.Background()); err == nil || len(f.killer.kills) != 0 {
		t.Errorf("driver down: err %v, kills %v", err, f.killer.kills)
	}

	f = newAccounting(t, v1.EnforcementKill)
	f.driver.set(map[string][]gpu.Process{gpuA: {honest, {PID: 101, Unknown: true}}})
	if u := usageOf(f.pass(t), uidT); u.Judged || len(f.killer.kills) != 0 {
		t.Errorf("unknown memory judged: %+v", u)
	}

	f = newAccounting(t, v1.EnforcementReport)
	f.driver.set(map[string][]gpu.Process{gpuB: {{PID: 100, UsedBytes: 300 * mib}}})
	if u := usageOf(f.pass(t), uidT); u.Over || u.Index != -1 || u.LimitBytes != 0 || u.BoundBytes != 1024*mib {
		t.Errorf("a context on a GPU not given: %+v", u)
	}
	f.driver.set(map[string][]gpu.Process{gpuB: {{PID: 100, UsedBytes: 2000 * mib}}})
	if u := usageOf(f.pass(t), uidT); !u.Over {
		t.Errorf("memory on a GPU not given: %+v", u)
	}
}

// The likely cause comes from the container's region: a process it does not
// list does not go through libvgpu.so; one it lists with the region's limit
// rewritten; one it lists with counters under the limit. The region only
// explains: the verdict and the offender are the same whatever it says.
func TestAccountingCause(t *testing.T) {
	for _, c := range []struct {
		name   string
		spec   region.LimitbedSpec
		offPID int32
		want   string
	}{
		{"not in the region", region.LimitbedSpec{Limits: map[int]uint64{0: 3000 * mib}}, 0, "is not in the container's usage region: it does not go through libvgpu.so"},
		{"limit rewritten", region.LimitbedSpec{}, 8, "the usage region's limit on device 0 was rewritten (region: unlimited, limits file: 3000 MiB)"},
		{"counters rewritten", region.LimitbedSpec{Limits: map[int]uint64{0: 3000 * mib}, UsedTotal: map[int]uint64{0: 0}}, 8, "the usage region counts 0 MiB on device 0 where the driver sees 5696 MiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newAccounting(t, v1.EnforcementReport)
			c.spec.Slots = []region.LimitbedSpecSlot{{Active: true, PID: 7}, {Active: c.offPID != 0, PID: c.offPID}}
			dir := filepath.Join(f.a.Dir, uidT+"_main")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, paths.UsageCacheName)
			if err := os.WriteFile(path, c.spec.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			holdSlotLocks(t, path, 2) // the processes are alive: they hold their slots' lock bytes
			f.driver.set(map[string][]gpu.Process{gpuA: {honest, bypass}})
			u := usageOf(f.pass(t), uidT)
			if !u.Over || u.Offender.PID != 101 || !strings.Contains(u.Cause, c.want) {
				t.Errorf("cause %q (offender %+v), want %q", u.Cause, u.Offender, c.want)
			}
			wantIn := map[int]string{100: "yes", 101: "no"}
			if c.offPID != 0 {
				wantIn[101] = "yes"
			}
			for _, p := range u.Processes {
				if p.InRegion != wantIn[p.PID] {
					t.Errorf("process %d in region %q, want %q", p.PID, p.InRegion, wantIn[p.PID])
				}
			}
		})
	}
}

// holdSlotLocks takes the lock bytes of slots 0..n-1 on a descriptor of its own, as their
// processes do.
func holdSlotLocks(t testing.TB, path string, n int) {
	t.Helper()
	owner, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { owner.Close() })
	for i := 0; i < n; i++ {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: int64(slotLockByteOffset + i), Len: 1}
		if err := unix.FcntlFlock(owner.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
			t.Fatal(err)
		}
	}
}

func ptypes(s string) types.UID { return types.UID(s) }

func countPrefix(ss []string, prefix string) int {
	n := 0
	for _, s := range ss {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}
