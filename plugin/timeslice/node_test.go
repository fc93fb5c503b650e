package timeslice

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/schedproto"
)

var testGPU = schedproto.UUID{0x3c, 0x5a, 0x7e, 0x21, 0x8f, 0x4b, 0x4d, 0x2a, 0x9b, 0x61, 0x0a, 0x1c, 0x2d, 0x3e, 0x4f, 0x50}

// node is a hook directory with the node's files as the device plugin leaves them.
type node struct {
	t          *testing.T
	grants     string
	containers string
}

func newNode(t *testing.T) *node {
	root := t.TempDir()
	n := &node{t: t, grants: filepath.Join(root, "sched"), containers: filepath.Join(root, "containers")}
	for _, d := range []string{n.grants, n.containers} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// container is what the device plugin writes at Allocate, and a report the test writes as a
// container's library would.
type container struct {
	key    string
	grant  []byte // read-only view of the grant file
	report []byte // read-write view of the report
}

func (n *node) add(key string, vars map[string]string) *container {
	t := n.t
	if vars != nil {
		b, err := limitsfile.Render(vars)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(n.containers, key+limitsfile.Suffix), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(n.containers, key)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	g, err := schedproto.GrantSpec{GPUs: []schedproto.UUID{testGPU}}.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	gp := schedproto.GrantPath(n.grants, key)
	if err := os.WriteFile(gp+".tmp", g, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(gp+".tmp", gp); err != nil { // published as the plugin does: a new file
		t.Fatal(err)
	}
	rp := filepath.Join(dir, schedproto.ReportName)
	if err := os.WriteFile(rp, schedproto.ReportSpec{}.Bytes(), 0o666); err != nil {
		t.Fatal(err)
	}
	return &container{key: key, grant: mapFile(t, gp, false), report: mapFile(t, rp, true)}
}

func mapFile(t *testing.T, path string, rw bool) []byte {
	t.Helper()
	flag, prot := unix.O_RDONLY, unix.PROT_READ
	if rw {
		flag, prot = unix.O_RDWR, unix.PROT_READ|unix.PROT_WRITE
	}
	fd, err := unix.Open(path, flag, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	m, err := unix.Mmap(fd, 0, schedproto.FileSize, prot, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(m) })
	return m
}

func (c *container) word() uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&c.grant[64+16])))
}

func (c *container) state() (uint32, schedproto.State) { return schedproto.SplitWord(c.word()) }

func (c *container) beat() uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&c.grant[64+28])))
}

func (c *container) grantID() uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&c.grant[64+20])))
}

func (c *container) want() { atomic.AddUint32((*uint32)(unsafe.Pointer(&c.report[64+8])), 1) }

func (c *container) setJoin(j schedproto.Join) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&c.report[64])), j.Encode())
}

func (n *node) run(t *testing.T, src Source) (*Node, func()) {
	cfg := DefaultConfig()
	nd := &Node{GrantDir: n.grants, ContainersDir: n.containers, Source: src, Config: cfg,
		Scan: 10 * time.Millisecond, Grace: 50 * time.Millisecond, Logger: ktesting.NewLogger(t, ktesting.DefaultConfig)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- nd.Run(ctx) }()
	return nd, func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if f() {
			return
		}
	}
	t.Fatalf("%s: not within 10 s", what)
}

func limits(limit, policy, prio string) map[string]string {
	return map[string]string{"CUDA_DEVICE_SM_LIMIT": limit, "GPU_CORE_UTILIZATION_POLICY": policy, "CUDA_TASK_PRIORITY": prio}
}

// The node loop drives the files as the protocol says: a container that wants the GPU is given a
// slice (Run with an id), revoked when its budget is spent, and the next one starts only once
// its drain is reported (or DrainWait later); the words beat while nothing changes; at shutdown
// every entry is Off.
func TestNodeDrivesTheFiles(t *testing.T) {
	n := newNode(t)
	a := n.add("poda_main", limits("30", "force", "1"))
	b := n.add("podb_main", limits("50", "force", "1"))
	_, stop := n.run(t, LimitsFiles{Dir: n.containers})
	eventually(t, "both set to wait", func() bool {
		_, sa := a.state()
		_, sb := b.state()
		return sa == schedproto.Wait && sb == schedproto.Wait
	})
	beat0, seq0 := a.beat(), a.word()
	time.Sleep(50 * time.Millisecond)
	if b := a.beat(); b-beat0 < 2 {
		t.Errorf("no heartbeat: beat %d then %d", beat0, b)
	}
	if a.word() != seq0 {
		t.Errorf("the word changed without a change of state: %#x then %#x", seq0, a.word())
	}
	// a wants the GPU and joins its slice; b waits.
	a.want()
	eventually(t, "a granted", func() bool { _, s := a.state(); return s == schedproto.Run })
	g := a.grantID()
	a.setJoin(schedproto.Join{Grant: g, Joins: 1})
	b.want()
	eventually(t, "a revoked after its 30 ms", func() bool { _, s := a.state(); return s == schedproto.Wait })
	// Until a reports its drain (or DrainWait passes), b does not start.
	time.Sleep(2 * time.Millisecond)
	b.want()
	if _, s := b.state(); s == schedproto.Run {
		// DrainWait (10 ms) may have passed on a loaded machine; the order is what matters.
		t.Log("b started before a reported its drain (DrainWait passed)")
	}
	a.setJoin(schedproto.Join{Grant: g, Joins: 1, Drains: 1})
	eventually(t, "b granted", func() bool { b.want(); _, s := b.state(); return s == schedproto.Run })
	stop()
	for _, c := range []*container{a, b} {
		if _, s := c.state(); s != schedproto.Off {
			t.Errorf("%s: state %v after shutdown, want off", c.key, s)
		}
	}
}

// A container whose limits file is missing is not scheduled (set Off: its library paces itself); a
// limit of 0 or 100, or disable, is never held (Free).
func TestNodeIdentity(t *testing.T) {
	n := newNode(t)
	unknown := n.add("podu_main", nil)
	free := n.add("podf_main", limits("100", "force", "1"))
	dis := n.add("podd_main", limits("30", "disable", "1"))
	_, stop := n.run(t, LimitsFiles{Dir: n.containers})
	defer stop()
	eventually(t, "never-held containers free", func() bool {
		_, f := free.state()
		_, d := dis.state()
		return f == schedproto.Free && d == schedproto.Free
	})
	// Its grant file starts Wait (the plugin's): the node sets it Off, so its library paces
	// itself at once rather than after the heartbeat's silence.
	eventually(t, "unidentified container off", func() bool { _, s := unknown.state(); return s == schedproto.Off })
}

// A dead container's grant file is removed once its directory has been gone a grace period; a
// re-allocated container's new grant file is picked up.
func TestNodeCollectsAndReopens(t *testing.T) {
	n := newNode(t)
	a := n.add("poda_main", limits("30", "force", "1"))
	_, stop := n.run(t, LimitsFiles{Dir: n.containers})
	defer stop()
	eventually(t, "a waits", func() bool { _, s := a.state(); return s == schedproto.Wait })
	// Re-allocation: a new grant file replaces the old one.
	a2 := n.add("poda_main", limits("30", "force", "1"))
	eventually(t, "new grant file driven", func() bool { _, s := a2.state(); return s == schedproto.Wait })
	if err := os.RemoveAll(filepath.Join(n.containers, "poda_main")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "grant file collected", func() bool {
		_, err := os.Stat(schedproto.GrantPath(n.grants, "poda_main"))
		return errors.Is(err, os.ErrNotExist)
	})
}

// A report the container truncates, replaces with a FIFO or a symlink costs nothing but its own
// scheduling: the node keeps driving the other container.
func TestNodeHostileReports(t *testing.T) {
	n := newNode(t)
	bad := n.add("podx_main", limits("30", "force", "1"))
	good := n.add("pody_main", limits("30", "force", "1"))
	_, stop := n.run(t, LimitsFiles{Dir: n.containers})
	defer stop()
	eventually(t, "both wait", func() bool {
		_, s := good.state()
		_, t := bad.state()
		return s == schedproto.Wait && t == schedproto.Wait
	})
	bad.want()
	eventually(t, "bad granted", func() bool { _, s := bad.state(); return s == schedproto.Run })
	rp := filepath.Join(n.containers, "podx_main", schedproto.ReportName)
	if err := os.Truncate(rp, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(rp); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(rp, 0o666); err != nil {
		t.Fatal(err)
	}
	eventually(t, "good granted in turn", func() bool { good.want(); _, s := good.state(); return s == schedproto.Run })
	if err := os.Remove(rp); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", rp); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	eventually(t, "good keeps getting turns", func() bool { good.want(); _, s := good.state(); return s == schedproto.Run })
}
