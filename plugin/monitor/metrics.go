package monitor

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/limitsfile"
)

// UsageCacheName is the region file in a container directory.
const UsageCacheName = "usage.cache"

var (
	descFileMemLimit = prometheus.NewDesc("hami_container_memory_limit_bytes",
		"Memory limit of a container's device as delivered in its limits file.",
		[]string{"pod_uid", "container", "device_index"}, nil)
	descFileCoreLimit = prometheus.NewDesc("hami_container_core_limit_ratio",
		"Compute limit of a container as delivered in its limits file (CUDA_DEVICE_SM_LIMIT/100; 0 = none).",
		[]string{"pod_uid", "container"}, nil)
	descUsed = prometheus.NewDesc("hami_container_memory_used_bytes",
		"Device memory reserved by a container's processes, the counter its library checks the limit against (limitbed: used_total of the usage region; HAMi-core: the sum over its slots).",
		[]string{"pod_uid", "container", "device_index"}, nil)
	descLiveUsed = prometheus.NewDesc("hami_container_memory_live_bytes",
		"Device memory held by a container's live processes: the usage region's live slots summed.",
		[]string{"pod_uid", "container", "device_index"}, nil)
	descProcesses = prometheus.NewDesc("hami_container_processes",
		"Live processes of a container: usage-region slots whose lock byte is held (limitbed) or whose pid is set (HAMi-core).",
		[]string{"pod_uid", "container"}, nil)
	descDeadSlots = prometheus.NewDesc("hami_container_region_dead_slots",
		"Usage-region slots whose process is gone and that no process has reclaimed yet (limitbed: their bytes still count in used_total).",
		[]string{"pod_uid", "container"}, nil)
	descOverflow = prometheus.NewDesc("hami_container_region_overflow",
		"1 when a process of the container had to account outside the usage region's slots (used_total may hold bytes of no slot).",
		[]string{"pod_uid", "container"}, nil)
	descRegionLimit = prometheus.NewDesc("hami_container_region_memory_limit_bytes",
		"Memory limit stamped into a container's usage region (absent when unlimited).",
		[]string{"pod_uid", "container", "device_index"}, nil)
	descRegionErrors = prometheus.NewDesc("hami_container_region_errors",
		"1 when a container's usage region could not be decoded.",
		[]string{"pod_uid", "container"}, nil)
)

// Collector exports per-container limits (from the .limits files) and usage
// (from usage.cache through a UsageReader). It reads the files at scrape
// time, so it holds no state that could go stale.
type Collector struct {
	Dir    string
	Usage  UsageReader // nil: no usage metrics
	Logger klog.Logger
}

var _ prometheus.Collector = (*Collector)(nil)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFileMemLimit, descFileCoreLimit, descUsed, descLiveUsed, descRegionLimit,
		descProcesses, descDeadSlots, descOverflow, descRegionErrors} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	entries, err := os.ReadDir(c.Dir)
	if err != nil {
		c.Logger.Error(err, "Listing containers for metrics", "dir", c.Dir)
		return
	}
	for _, de := range entries {
		e, ok := ParseEntry(de.Name(), de.IsDir())
		if !ok {
			continue
		}
		switch e.Kind {
		case KindLimits:
			c.collectLimits(ch, e)
		case KindDir:
			c.collectRegion(ch, e)
		}
	}
}

func (c *Collector) collectLimits(ch chan<- prometheus.Metric, e Entry) {
	data, err := os.ReadFile(filepath.Join(c.Dir, e.Name))
	if err != nil {
		return // removed between listing and reading
	}
	vars := limitsfile.Parse(data).Vars
	uid, ctr := string(e.PodUID), e.Container
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		idx, ok := strings.CutPrefix(k, "CUDA_DEVICE_MEMORY_LIMIT_")
		if !ok || !limitsfile.IsMemoryKey(k) {
			continue
		}
		if n, err := limitsfile.ParseMemory(vars[k]); err == nil {
			ch <- prometheus.MustNewConstMetric(descFileMemLimit, prometheus.GaugeValue, float64(n), uid, ctr, idx)
		}
	}
	if sm, err := strconv.ParseUint(vars["CUDA_DEVICE_SM_LIMIT"], 10, 32); err == nil {
		ch <- prometheus.MustNewConstMetric(descFileCoreLimit, prometheus.GaugeValue, float64(sm)/100, uid, ctr)
	}
}

func (c *Collector) collectRegion(ch chan<- prometheus.Metric, e Entry) {
	if c.Usage == nil {
		return
	}
	path := filepath.Join(c.Dir, e.Name, UsageCacheName)
	if _, err := os.Stat(path); err != nil {
		return // no process has created the region yet
	}
	uid, ctr := string(e.PodUID), e.Container
	u, err := c.Usage.ReadUsage(path)
	if err != nil {
		c.Logger.V(2).Info("Undecodable usage region", "container", e.Name, "err", err)
		ch <- prometheus.MustNewConstMetric(descRegionErrors, prometheus.GaugeValue, 1, uid, ctr)
		return
	}
	for _, d := range u.Devices {
		idx := strconv.Itoa(d.Index)
		ch <- prometheus.MustNewConstMetric(descUsed, prometheus.GaugeValue, float64(d.UsedBytes), uid, ctr, idx)
		ch <- prometheus.MustNewConstMetric(descLiveUsed, prometheus.GaugeValue, float64(d.LiveBytes), uid, ctr, idx)
		if !d.Unlimited {
			ch <- prometheus.MustNewConstMetric(descRegionLimit, prometheus.GaugeValue, float64(d.LimitBytes), uid, ctr, idx)
		}
	}
	ch <- prometheus.MustNewConstMetric(descProcesses, prometheus.GaugeValue, float64(len(u.Live())), uid, ctr)
	ch <- prometheus.MustNewConstMetric(descDeadSlots, prometheus.GaugeValue, float64(u.DeadSlots()), uid, ctr)
	overflow := 0.0
	if u.Overflow {
		overflow = 1
	}
	ch <- prometheus.MustNewConstMetric(descOverflow, prometheus.GaugeValue, overflow, uid, ctr)
}

// SweepMetrics counts sweep removals: hami_monitor_removed_total{kind}.
func SweepMetrics(reg prometheus.Registerer) func(Kind) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hami_monitor_removed_total",
		Help: "Entries removed from the containers directory, by kind (dir, limits, temp).",
	}, []string{"kind"})
	reg.MustRegister(c)
	return func(k Kind) { c.WithLabelValues(string(k)).Inc() }
}
