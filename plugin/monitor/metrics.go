package monitor

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/internal/safefile"
	"github.com/limitbed/limitbed/plugin/libvars"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/monitor/metricname"
)

var (
	descFileMemLimit = prometheus.NewDesc(metricname.MemoryLimit,
		"Memory limit of a container's device as delivered in its limits file.",
		[]string{"pod_uid", "container", "device_index"}, nil)
	descFileCoreLimit = prometheus.NewDesc(metricname.CoreLimit,
		"Compute limit of a container as delivered in its limits file (CUDA_DEVICE_SM_LIMIT/100; 0 = none).",
		[]string{"pod_uid", "container"}, nil)
	descUsed = prometheus.NewDesc(metricname.MemoryUsed,
		"Device memory reserved by a container's processes, the counter its library checks the limit against (limitbed: used_total of the usage region; HAMi-core: the sum over its slots).",
		[]string{"pod_uid", "container", "device_index"}, nil)
	descLiveUsed = prometheus.NewDesc(metricname.MemoryLive,
		"Device memory held by a container's live processes: the usage region's live slots summed.",
		[]string{"pod_uid", "container", "device_index"}, nil)
	descProcesses = prometheus.NewDesc(metricname.Processes,
		"Live processes of a container: usage-region slots whose lock byte is held (limitbed) or whose pid is set (HAMi-core).",
		[]string{"pod_uid", "container"}, nil)
	descDeadSlots = prometheus.NewDesc(metricname.RegionDeadSlots,
		"Usage-region slots whose process is gone and that no process has reclaimed yet (limitbed: their bytes still count in used_total).",
		[]string{"pod_uid", "container"}, nil)
	descOverflow = prometheus.NewDesc(metricname.RegionOverflow,
		"1 when a process of the container had to account outside the usage region's slots (used_total may hold bytes of no slot).",
		[]string{"pod_uid", "container"}, nil)
	descRegionLimit = prometheus.NewDesc(metricname.RegionMemoryLimit,
		"Memory limit stamped into a container's usage region (absent when unlimited).",
		[]string{"pod_uid", "container", "device_index"}, nil)
	descRegionErrors = prometheus.NewDesc(metricname.RegionErrors,
		"1 when a container's usage region could not be decoded.",
		[]string{"pod_uid", "container"}, nil)
	descRegionRejected = prometheus.NewDesc(metricname.RegionFileRejected,
		"1 when a container's usage.cache was not read: a symlink, not a regular file, not a region's size, unreadable, or its read ran past the scrape deadline (reason).",
		[]string{"pod_uid", "container", "reason"}, nil)
)

// maxLimitsFile bounds a limits file read by the monitor (the plugin writes
// a few hundred bytes; libvgpu reads at most 4 MiB).
const maxLimitsFile = 4 << 20

// Collector exports per-container limits (from the .limits files) and usage
// (from usage.cache through a UsageReader). It reads the files at scrape
// time, so it holds no state that could go stale.
type Collector struct {
	Dir    string
	Usage  UsageReader // nil: no usage metrics
	Logger klog.Logger
	// ScrapeTimeout bounds the wait for all usage regions of one scrape;
	// 0 means DefaultScrapeTimeout.
	ScrapeTimeout time.Duration

	scrapeState
}

var _ prometheus.Collector = (*Collector)(nil)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFileMemLimit, descFileCoreLimit, descUsed, descLiveUsed, descRegionLimit,
		descProcesses, descDeadSlots, descOverflow, descRegionErrors, descRegionRejected} {
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
	var dirs []Entry
	for _, de := range entries {
		e, ok := ParseEntry(de.Name(), de.IsDir())
		if !ok {
			continue
		}
		switch e.Kind {
		case KindLimits:
			c.collectLimits(ch, e)
		case KindDir:
			dirs = append(dirs, e)
		}
	}
	if c.Usage == nil {
		return
	}
	results := c.readRegions(dirs)
	for _, e := range dirs {
		c.collectRegion(ch, e, results[e.Name])
	}
}

func (c *Collector) collectLimits(ch chan<- prometheus.Metric, e Entry) {
	data, err := safefile.ReadFile(filepath.Join(c.Dir, e.Name), safefile.Size{Min: 0, Max: maxLimitsFile})
	if err != nil {
		if safefile.ReasonOf(err) != safefile.ReasonMissing { // else removed between listing and reading
			c.Logger.Info("Limits file not read", "file", e.Name, "err", err)
		}
		return
	}
	vars := limitsfile.Parse(data).Vars
	uid, ctr := string(e.PodUID), e.Container
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		idx, ok := strings.CutPrefix(k, libvars.MemoryLimit+"_")
		if !ok || !limitsfile.IsMemoryKey(k) {
			continue
		}
		if n, err := limitsfile.ParseMemory(vars[k]); err == nil {
			ch <- prometheus.MustNewConstMetric(descFileMemLimit, prometheus.GaugeValue, float64(n), uid, ctr, idx)
		}
	}
	if sm, err := strconv.ParseUint(vars[libvars.SMLimit], 10, 32); err == nil {
		ch <- prometheus.MustNewConstMetric(descFileCoreLimit, prometheus.GaugeValue, float64(sm)/100, uid, ctr)
	}
}

func (c *Collector) collectRegion(ch chan<- prometheus.Metric, e Entry, r regionResult) {
	uid, ctr := string(e.PodUID), e.Container
	u, err := r.usage, r.err
	var fe *safefile.Error
	switch {
	case err != nil && errors.As(err, &fe) && fe.Reason == safefile.ReasonMissing:
		c.clearReport(e.Name)
		return // no process has created the region yet
	case err != nil && errors.As(err, &fe):
		c.reportOnce(e, err)
		ch <- prometheus.MustNewConstMetric(descRegionRejected, prometheus.GaugeValue, 1, uid, ctr, string(fe.Reason))
		ch <- prometheus.MustNewConstMetric(descRegionErrors, prometheus.GaugeValue, 1, uid, ctr)
		return
	case err != nil:
		c.Logger.V(2).Info("Undecodable usage region", "container", e.Name, "err", err)
		ch <- prometheus.MustNewConstMetric(descRegionErrors, prometheus.GaugeValue, 1, uid, ctr)
		return
	}
	c.clearReport(e.Name)
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
		Name: metricname.Removed,
		Help: "Entries removed from the containers directory, by kind (dir, limits, temp).",
	}, []string{"kind"})
	reg.MustRegister(c)
	return func(k Kind) { c.WithLabelValues(string(k)).Inc() }
}
