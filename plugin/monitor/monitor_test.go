package monitor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/internal/fixtures"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/region"
)

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
	if err := os.WriteFile(filepath.Join(dir, "uid1_main", paths.UsageCacheName),
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
	if err := os.WriteFile(filepath.Join(dir, "uid2_side", paths.UsageCacheName), []byte("garbage"), 0o666); err != nil {
		t.Fatal(err)
	}
	// On the same node, a pod whose library is upstream HAMi-core: its region
	// (written by HAMi-core itself) holds 1024 MiB of data and 300 MiB of
	// context memory under a 3000 MiB limit, one live process.
	if err := os.MkdirAll(filepath.Join(dir, "uid3_main"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "uid3_main", paths.UsageCacheName),
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
