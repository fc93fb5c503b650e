package monitor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/internal/fixtures"
	"github.com/limitbed/limitbed/plugin/allocate"
	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/region"
)

type lister struct {
	mu   sync.Mutex
	pods []PodRef
	err  error
}

func (l *lister) ListPods(context.Context) ([]PodRef, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]PodRef(nil), l.pods...), l.err
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
		{"uid1_main.limits", true, Entry{Name: "uid1_main.limits", Kind: KindDir, PodUID: "uid1", Container: "main.limits"}, true},
		{"nounderscore", true, Entry{}, false},
		{"_main", true, Entry{}, false},
		{"uid_", true, Entry{}, false},
		{"libvgpu.so", false, Entry{}, false},
		{".hidden", true, Entry{}, false},
		{"uid1_main.cache", false, Entry{}, false},
	}
	for _, tc := range cases {
		got, ok := ParseEntry(tc.name, tc.dir)
		if ok != tc.valid || (ok && got != tc.want) {
			t.Errorf("ParseEntry(%q, %v) = %+v, %v; want %+v, %v", tc.name, tc.dir, got, ok, tc.want, tc.valid)
		}
	}
}

type fixture struct {
	dir string
	now time.Time
}

func (f fixture) mk(t *testing.T, name string, dir bool, age time.Duration) {
	t.Helper()
	p := filepath.Join(f.dir, name)
	var err error
	if dir {
		err = os.MkdirAll(filepath.Join(p, "sub"), 0o777)
		if err == nil {
			err = os.WriteFile(filepath.Join(p, "usage.cache"), []byte("x"), 0o666)
		}
	} else {
		err = os.WriteFile(p, []byte("x"), 0o644)
	}
	if err == nil {
		mt := f.now.Add(-age)
		err = os.Chtimes(p, mt, mt)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (f fixture) exists(name string) bool {
	_, err := os.Lstat(filepath.Join(f.dir, name))
	return err == nil
}

func TestSweep(t *testing.T) {
	old, young := 2*DefaultGrace, time.Second
	entries := []struct {
		name    string
		dir     bool
		age     time.Duration
		removed bool
	}{
		{"dead_main", true, old, true},
		{"dead_main.limits", false, old, true},
		{"orphan_ctr.limits", false, old, true}, // its directory is already gone
		{"young_main", true, young, false},      // grace: maybe allocated a moment ago
		{"young_main.limits", false, young, false},
		{"live_main", true, old, false},
		{"live_main.limits", false, old, false},
		{".live_main.limits.tmp-1", false, old, true}, // crash debris of a live pod
		{".dead_main.limits.tmp-2", false, young, false},
		{"libvgpu.so", false, old, false},
		{"random", true, old, false},
	}
	f := fixture{dir: t.TempDir(), now: time.Now()}
	for _, e := range entries {
		f.mk(t, e.name, e.dir, e.age)
	}
	api := &lister{pods: []PodRef{{UID: "live", Namespace: "default", Name: "live"}}}
	var removed []Kind
	s := &Sweeper{Dir: f.dir, API: api, Grace: DefaultGrace, Logger: klog.Background(), OnRemove: func(k Kind) { removed = append(removed, k) }}
	res, err := s.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if f.exists(e.name) == e.removed {
			t.Errorf("%s: exists=%v, want removed=%v", e.name, f.exists(e.name), e.removed)
		}
	}
	if res.Removed[KindDir] != 1 || res.Removed[KindLimits] != 2 || res.Removed[KindTemp] != 1 || len(removed) != 4 {
		t.Errorf("result = %+v, callbacks %v", res.Removed, removed)
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
			f := fixture{dir: t.TempDir(), now: time.Now()}
			f.mk(t, "dead_main", true, time.Hour)
			f.mk(t, "dead_main.limits", false, time.Hour)
			s := &Sweeper{Dir: f.dir, API: tc.api, Grace: time.Minute, Logger: klog.Background()}
			if tc.kubelet != nil {
				s.Kubelet = tc.kubelet
			}
			_, err := s.Sweep(context.Background())
			if (tc.api.err != nil || (tc.kubelet != nil && tc.kubelet.err != nil)) && err == nil {
				t.Fatal("sweep did not report the listing error")
			}
			if !f.exists("dead_main") || !f.exists("dead_main.limits") {
				t.Fatal("removed entries although liveness was unknown")
			}
		})
	}
}

// TestSweepRacesAllocate runs sweeps in a loop while 200 allocations create
// directories and .limits files for pods the API snapshot does not know yet
// (informer lag). Stale entries prepared beforehand are swept, proving the
// sweeper was active; every file Allocate wrote survives intact.
func TestSweepRacesAllocate(t *testing.T) {
	hook := t.TempDir()
	dir := allocate.ContainersDir(hook)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := allocate.New(allocate.Options{HookPath: hook})
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{dir: dir, now: time.Now()}
	for i := range 20 {
		f.mk(t, fmt.Sprintf("stale%d_main", i), true, time.Hour)
		f.mk(t, fmt.Sprintf("stale%d_main.limits", i), false, time.Hour)
	}
	s := &Sweeper{Dir: dir, API: &lister{}, Grace: 30 * time.Second, Logger: klog.Background()}

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
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: types.UID(fmt.Sprintf("new%d", i))}}
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
	for sweeps.Load() < 3 {
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
		if !f.exists(fmt.Sprintf("new%d_main", i)) {
			t.Fatalf("allocation %d lost its directory", i)
		}
	}
	for i := range 20 {
		if f.exists(fmt.Sprintf("stale%d_main", i)) || f.exists(fmt.Sprintf("stale%d_main.limits", i)) {
			t.Fatalf("stale entry %d survived %d sweeps", i, sweeps.Load())
		}
	}
}

// TestCollector exports limits and usage of every container of a node: one
// whose region is limitbed's layout, one whose region upstream HAMi-core
// wrote, and one whose region is garbage.
func TestCollector(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "uid1_main.limits"),
		[]byte("CUDA_DEVICE_MEMORY_LIMIT_0=3000m\nCUDA_DEVICE_MEMORY_LIMIT_1=1g\nCUDA_DEVICE_SM_LIMIT=50\nHAMI_LIMITS_FORMAT=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "uid1_main"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "uid1_main", UsageCacheName),
		region.LimitbedSpec{
			Limits: map[int]uint64{0: 3000 << 20}, UsedTotal: map[int]uint64{0: 3 << 20},
			// Nobody holds the lock bytes: the first owner died, unreclaimed.
			Slots: []region.LimitbedSpecSlot{{Active: true, PID: 7, Used: map[int]uint64{0: 1 << 20}}},
		}.Bytes(), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "uid2_side"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "uid2_side", UsageCacheName), []byte("garbage"), 0o666); err != nil {
		t.Fatal(err)
	}
	// On the same node, a pod whose library is upstream HAMi-core: its region
	// (written by HAMi-core itself) holds 1024 MiB of data and 300 MiB of
	// context memory under a 3000 MiB limit, one live process.
	if err := os.MkdirAll(filepath.Join(dir, "uid3_main"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "uid3_main", UsageCacheName),
		fixtures.Read(t, "hami-core-region/live-1024mib.cache.gz"), 0o666); err != nil {
		t.Fatal(err)
	}
	c := &Collector{Dir: dir, Usage: RegionFiles{}, Logger: klog.Background()}
	want := `
# HELP hami_container_core_limit_ratio Compute limit of a container as delivered in its limits file (CUDA_DEVICE_SM_LIMIT/100; 0 = none).
# TYPE hami_container_core_limit_ratio gauge
hami_container_core_limit_ratio{container="main",pod_uid="uid1"} 0.5
# HELP hami_container_memory_limit_bytes Memory limit of a container's device as delivered in its limits file.
# TYPE hami_container_memory_limit_bytes gauge
hami_container_memory_limit_bytes{container="main",device_index="0",pod_uid="uid1"} 3.145728e+09
hami_container_memory_limit_bytes{container="main",device_index="1",pod_uid="uid1"} 1.073741824e+09
# HELP hami_container_memory_live_bytes Device memory held by a container's live processes: the usage region's live slots summed.
# TYPE hami_container_memory_live_bytes gauge
hami_container_memory_live_bytes{container="main",device_index="0",pod_uid="uid1"} 0
hami_container_memory_live_bytes{container="main",device_index="0",pod_uid="uid3"} 1.388314624e+09
# HELP hami_container_memory_used_bytes Device memory reserved by a container's processes, the counter its library checks the limit against (limitbed: used_total of the usage region; HAMi-core: the sum over its slots).
# TYPE hami_container_memory_used_bytes gauge
hami_container_memory_used_bytes{container="main",device_index="0",pod_uid="uid1"} 3.145728e+06
hami_container_memory_used_bytes{container="main",device_index="0",pod_uid="uid3"} 1.388314624e+09
# HELP hami_container_processes Live processes of a container: usage-region slots whose lock byte is held (limitbed) or whose pid is set (HAMi-core).
# TYPE hami_container_processes gauge
hami_container_processes{container="main",pod_uid="uid1"} 0
hami_container_processes{container="main",pod_uid="uid3"} 1
# HELP hami_container_region_dead_slots Usage-region slots whose process is gone and that no process has reclaimed yet (limitbed: their bytes still count in used_total).
# TYPE hami_container_region_dead_slots gauge
hami_container_region_dead_slots{container="main",pod_uid="uid1"} 1
hami_container_region_dead_slots{container="main",pod_uid="uid3"} 0
# HELP hami_container_region_errors 1 when a container's usage region could not be decoded.
# TYPE hami_container_region_errors gauge
hami_container_region_errors{container="side",pod_uid="uid2"} 1
# HELP hami_container_region_file_rejected 1 when a container's usage.cache was not read: a symlink, not a regular file, not a region's size, unreadable, or its read ran past the scrape deadline (reason).
# TYPE hami_container_region_file_rejected gauge
hami_container_region_file_rejected{container="side",pod_uid="uid2",reason="size"} 1
# HELP hami_container_region_memory_limit_bytes Memory limit stamped into a container's usage region (absent when unlimited).
# TYPE hami_container_region_memory_limit_bytes gauge
hami_container_region_memory_limit_bytes{container="main",device_index="0",pod_uid="uid1"} 3.145728e+09
hami_container_region_memory_limit_bytes{container="main",device_index="0",pod_uid="uid3"} 3.145728e+09
# HELP hami_container_region_overflow 1 when a process of the container had to account outside the usage region's slots (used_total may hold bytes of no slot).
# TYPE hami_container_region_overflow gauge
hami_container_region_overflow{container="main",pod_uid="uid1"} 0
hami_container_region_overflow{container="main",pod_uid="uid3"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	inc := SweepMetrics(reg)
	inc(KindDir)
	inc(KindTemp)
	inc(KindTemp)
	if n := testutil.CollectAndCount(reg, "hami_monitor_removed_total"); n != 2 {
		t.Fatalf("%d removed series", n)
	}
}
