package monitor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/allocate"
	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/paths"
	"golang.org/x/sys/unix"
)

type lister struct {
	mu   sync.Mutex
	pods []PodRef
	err  error
	// during, when set, runs inside ListPods (something happening while the
	// sweep waits for the API server).
	during func()
}

func (l *lister) ListPods(context.Context) ([]PodRef, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.during != nil {
		l.during()
	}
	return append([]PodRef(nil), l.pods...), l.err
}

func (l *lister) add(uid string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pods = append(l.pods, PodRef{UID: types.UID(uid), Namespace: "default", Name: uid})
}

func TestParseEntry(t *testing.T) {
	cases := []struct {
		name  string
		dir   bool
		want  Entry
		valid bool
	}{
		{"uid1_main", true, Entry{Name: "uid1_main", Kind: KindDir, PodUID: "uid1", Container: "main"}, true},
		{"uid1_main.limits", false, Entry{Name: "uid1_main.limits", Kind: KindLimits, PodUID: "uid1", Container: "main"}, true},
		{".uid1_main.limits.tmp-123", false, Entry{Name: ".uid1_main.limits.tmp-123", Kind: KindTemp, PodUID: "uid1", Container: "main"}, true},
		{".uid1_main.limits.tmp-123", true, Entry{}, false}, // a dir is never a temp file
		{"uid1_main.limits", true, Entry{}, false},          // no container is called main.limits
		{"nounderscore", true, Entry{}, false},
		{"_main", true, Entry{}, false},
		{"uid_", true, Entry{}, false},
		{"libvgpu.so", false, Entry{}, false},
		{".hidden", true, Entry{}, false},
		{"uid1_main.cache", false, Entry{}, false},
		// Only what paths.ContainerKey makes reaches a path or a metric
		// label: no name that a real API server would not have handed out.
		{"uid1_Main", true, Entry{}, false},
		{"uid1_ma\nin", true, Entry{}, false},
		{"uid\xff_main", true, Entry{}, false},
		{"uid 1_main", true, Entry{}, false},
	}
	for _, tc := range cases {
		got, ok := ParseEntry(tc.name, tc.dir)
		if ok != tc.valid || (ok && got != tc.want) {
			t.Errorf("ParseEntry(%q, %v) = %+v, %v; want %+v, %v", tc.name, tc.dir, got, ok, tc.want, tc.valid)
		}
	}
}

// mk creates an entry: a directory with a usage.cache inside, or a file.
func mk(t *testing.T, dir, name string, isDir bool) {
	t.Helper()
	p := filepath.Join(dir, name)
	var err error
	if isDir {
		if err = os.MkdirAll(filepath.Join(p, "sub"), 0o777); err == nil {
			err = os.WriteFile(filepath.Join(p, "usage.cache"), []byte("x"), 0o666)
		}
	} else {
		err = os.WriteFile(p, []byte("x"), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func exists(dir, name string) bool {
	_, err := os.Lstat(filepath.Join(dir, name))
	return err == nil
}

// clock is a Sweeper clock the test moves.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

// TestSweep: a dead pod's directory and .limits file (orphans too) and any
// temporary file go once the monitor has seen them removable for the grace
// period; a live pod's entries and names that are not the plugin's stay.
func TestSweep(t *testing.T) {
	const grace = time.Minute
	dir := t.TempDir()
	entries := []struct {
		name    string
		dir     bool
		removed bool
	}{
		{"dead_main", true, true},
		{"dead_main.limits", false, true},
		{"orphan_ctr.limits", false, true}, // its directory is already gone
		{"live_main", true, false},
		{"live_main.limits", false, false},
		{".live_main.limits.tmp-1", false, true}, // crash debris of a live pod
		{"libvgpu.so", false, false},
		{"random", true, false},
	}
	for _, e := range entries {
		mk(t, dir, e.name, e.dir)
	}
	c := &clock{now: time.Now()}
	var removed []Kind
	s := &Sweeper{Dir: dir, API: &lister{pods: []PodRef{{UID: "live", Namespace: "default", Name: "live"}}}, Grace: grace,
		Now: c.Now, Logger: klog.Background(), OnRemove: func(k Kind) { removed = append(removed, k) }}
	sweep := func() Result {
		t.Helper()
		res, err := s.Sweep(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := sweep(); len(res.Removed) != 0 {
		t.Fatalf("the first sweep removed %v: nothing has been dead for the grace period yet", res.Removed)
	}
	mk(t, dir, "late_main", true) // dies after the first sweep
	c.now = c.now.Add(grace)
	res := sweep()
	for _, e := range entries {
		if exists(dir, e.name) == e.removed {
			t.Errorf("%s: exists=%v, want removed=%v", e.name, exists(dir, e.name), e.removed)
		}
	}
	if res.Removed[KindDir] != 1 || res.Removed[KindLimits] != 2 || res.Removed[KindTemp] != 1 || len(removed) != 4 {
		t.Errorf("result = %+v, callbacks %v", res.Removed, removed)
	}
	if !exists(dir, "late_main") {
		t.Fatal("late_main removed before its grace period")
	}
	c.now = c.now.Add(grace)
	sweep()
	if exists(dir, "late_main") {
		t.Fatal("late_main kept after its grace period")
	}
}

// A dead pod's cache directory is collected whatever its times say: the
// container set them (a directory stamped in 2099 was never collected when
// the sweep went by mtime).
func TestSweepIgnoresTheContainersClock(t *testing.T) {
	dir := t.TempDir()
	future := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, name := range []string{"future_main", "past_main"} {
		mk(t, dir, name, true)
	}
	if err := os.Chtimes(filepath.Join(dir, "future_main"), future, future); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(dir, "past_main"), time.Unix(1, 0), time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	c := &clock{now: time.Now()}
	s := &Sweeper{Dir: dir, API: &lister{}, Grace: time.Minute, Now: c.Now, Logger: klog.Background()}
	if _, err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !exists(dir, "past_main") {
		t.Fatal("an old mtime cut the grace period short")
	}
	c.now = c.now.Add(time.Minute)
	if _, err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"future_main", "past_main"} {
		if exists(dir, name) {
			t.Errorf("%s survived the sweep after the grace period", name)
		}
	}
}

// A dead pod's directory holding a chain deeper than the monitor's file
// descriptor limit, and links to host files, is removed; the links' targets
// are not. The sweep runs in a child process with its limit lowered to 32.
func TestSweepRemovesADeepTree(t *testing.T) {
	if d := os.Getenv("MONITOR_DEEP_DIR"); d != "" {
		var lim unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		lim.Cur = 32
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		s := &Sweeper{Dir: d, API: &lister{}, Logger: klog.Background()}
		if _, err := s.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		return
	}
	root := t.TempDir()
	dir := filepath.Join(root, "containers")
	host := filepath.Join(root, "host")
	if err := os.MkdirAll(host, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "shadow"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// 400 levels, a link to the host directory on every tenth: deeper than 32 descriptors.
	deep := filepath.Join(dir, "dead_main")
	p := deep
	for i := range 400 {
		p = filepath.Join(p, "d")
		if i%10 == 0 {
			if err := os.MkdirAll(p, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(host, filepath.Join(p, "link")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.MkdirAll(p, 0o777); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSweepRemovesADeepTree$")
	cmd.Env = append(os.Environ(), "MONITOR_DEEP_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sweep under a 32-descriptor limit: %v\n%s", err, out)
	}
	if exists(dir, "dead_main") {
		t.Fatal("the deep directory survived the sweep")
	}
	if !exists(host, "shadow") {
		t.Fatal("a link's target was removed")
	}
}

func TestSweepRemovesNothingWhenUnsure(t *testing.T) {
	cases := []struct {
		name    string
		api     *lister
		kubelet *lister
	}{
		{"API error", &lister{err: errors.New("apiserver down")}, nil},
		{"kubelet error", &lister{}, &lister{err: errors.New("no socket")}},
		// kubelet still runs a pod the API server forgot (forced delete):
		// its UID is unknown, so no unknown UID may be removed.
		{"kubelet pod unknown to the API", &lister{}, &lister{pods: []PodRef{{Namespace: "default", Name: "forced"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			mk(t, dir, "dead_main", true)
			mk(t, dir, "dead_main.limits", false)
			s := &Sweeper{Dir: dir, API: tc.api, Logger: klog.Background()}
			if tc.kubelet != nil {
				s.Kubelet = tc.kubelet
			}
			_, err := s.Sweep(context.Background())
			if (tc.api.err != nil || (tc.kubelet != nil && tc.kubelet.err != nil)) && err == nil {
				t.Fatal("sweep did not report the listing error")
			}
			if !exists(dir, "dead_main") || !exists(dir, "dead_main.limits") {
				t.Fatal("removed entries although liveness was unknown")
			}
		})
	}
}

// The directory is listed before the API server is asked who is alive: a pod
// created and allocated while the sweep waits for the API server is not in
// the listing, so its fresh directory is not taken for a dead pod's.
func TestSweepListsBeforeAskingWhoIsAlive(t *testing.T) {
	dir := t.TempDir()
	mk(t, dir, "dead_main", true)
	api := &lister{}
	api.during = func() { mk(t, dir, "fresh_main", true) } // the pod is created after the snapshot's read
	s := &Sweeper{Dir: dir, API: api, Logger: klog.Background()}
	if _, err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if exists(dir, "dead_main") || !exists(dir, "fresh_main") {
		t.Fatalf("dead_main exists %v (want removed), fresh_main exists %v (want kept)", exists(dir, "dead_main"), exists(dir, "fresh_main"))
	}
}

// A silent API server does not hold a sweep: its liveness query ends at the
// sweep's API timeout, and nothing is removed.
func TestSweepBoundedByItsAPITimeout(t *testing.T) {
	dir := t.TempDir()
	mk(t, dir, "dead_main", true)
	s := &Sweeper{Dir: dir, API: blockingLister{}, APITimeout: 50 * time.Millisecond, Logger: klog.Background()}
	done := make(chan error, 1)
	go func() { _, err := s.Sweep(context.Background()); done <- err }()
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the deadline", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sweep is still waiting for the API server")
	}
	if !exists(dir, "dead_main") {
		t.Fatal("removed without knowing who is alive")
	}
}

type blockingLister struct{}

func (blockingLister) ListPods(ctx context.Context) ([]PodRef, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSweepRacesAllocate runs sweeps in a loop while 200 allocations create
// directories and .limits files for pods the API server has (as it has every
// pod the plugin allocates: the plugin read it there). Stale entries are
// swept, proving the sweeper was active; every file Allocate wrote survives.
func TestSweepRacesAllocate(t *testing.T) {
	hook := t.TempDir()
	dir := paths.ContainersDir(hook)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := allocate.New(allocate.Options{HookPath: hook})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		mk(t, dir, fmt.Sprintf("stale%d_main", i), true)
		mk(t, dir, fmt.Sprintf("stale%d_main.limits", i), false)
	}
	api := &lister{}
	s := &Sweeper{Dir: dir, API: api, Logger: klog.Background()}

	ctx, cancel := context.WithCancel(context.Background())
	var sweeps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if _, err := s.Sweep(ctx); err != nil {
				t.Error(err)
				return
			}
			sweeps.Add(1)
		}
	}()
	const n = 200
	var awg sync.WaitGroup
	for i := range n {
		awg.Add(1)
		go func() {
			defer awg.Done()
			uid := fmt.Sprintf("new%d", i)
			api.add(uid) // the pod exists before its Allocate
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: uid, UID: types.UID(uid)}}
			_, err := a.Allocate(allocate.Request{
				Pod: pod, Container: &corev1.Container{Name: "main"}, Delivery: v1.LimitDeliveryFile,
				Devices: annotations.ContainerDevices{{UUID: "GPU-a", UsedMem: int32(i + 1), UsedCores: 10}},
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	awg.Wait()
	for start := sweeps.Load(); sweeps.Load() < start+2; {
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()

	for i := range n {
		data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("new%d_main.limits", i)))
		if err != nil {
			t.Fatalf("allocation %d lost its file: %v", i, err)
		}
		if !strings.Contains(string(data), fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT_0=%dm\n", i+1)) {
			t.Fatalf("allocation %d file = %q", i, data)
		}
		if !exists(dir, fmt.Sprintf("new%d_main", i)) {
			t.Fatalf("allocation %d lost its directory", i)
		}
	}
	for i := range 20 {
		if exists(dir, fmt.Sprintf("stale%d_main", i)) || exists(dir, fmt.Sprintf("stale%d_main.limits", i)) {
			t.Fatalf("stale entry %d survived %d sweeps", i, sweeps.Load())
		}
	}
}
