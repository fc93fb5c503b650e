package monitor

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitbed/limitbed/plugin/monitor/metricname"
)

var (
	descComputeBusy = prometheus.NewDesc(metricname.ComputeBusy,
		"A container's processes' share of a GPU over the last accounting pass by the driver's per-process samples (nvmlDeviceGetProcessUtilization), whatever they loaded; only on GPUs the node scheduler drives the container on.",
		driverLabels, nil)
	descComputeAllowed = prometheus.NewDesc(metricname.ComputeAllowed,
		"The share of the last pass (or two) the node scheduler allowed a container on a GPU: its slices, free time and drains, from its grant file.",
		driverLabels, nil)
	descComputeOutside = prometheus.NewDesc(metricname.ComputeOutside,
		"1 when a container's processes were busy on a GPU beyond what the scheduler allowed it (plus the margin), by the driver's samples, else 0.",
		driverLabels, nil)
	descComputeKills = prometheus.NewDesc(metricname.ComputeKills,
		"Processes the monitor killed (enforcement: kill) for working on a GPU outside their container's slices.",
		[]string{"pod_uid", "container"}, nil)
)

// ComputeCollector exports the compute check of the last accounting pass.
type ComputeCollector struct {
	Accounting *Accounting
}

var _ prometheus.Collector = (*ComputeCollector)(nil)

// Describe implements prometheus.Collector.
func (c *ComputeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descComputeBusy, descComputeAllowed, descComputeOutside, descComputeKills} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *ComputeCollector) Collect(ch chan<- prometheus.Metric) {
	for k, n := range c.Accounting.computeKills() {
		ch <- prometheus.MustNewConstMetric(descComputeKills, prometheus.CounterValue, float64(n), string(k.PodUID), k.Container)
	}
	rep := c.Accounting.Last()
	if rep == nil {
		return
	}
	for _, u := range rep.Compute {
		l := []string{string(u.Container.PodUID), u.Container.Container, u.GPU, strconv.Itoa(u.Index)}
		outside := 0.0
		if u.Outside {
			outside = 1
		}
		ch <- prometheus.MustNewConstMetric(descComputeBusy, prometheus.GaugeValue, u.Busy, l...)
		ch <- prometheus.MustNewConstMetric(descComputeAllowed, prometheus.GaugeValue, u.Allowed, l...)
		ch <- prometheus.MustNewConstMetric(descComputeOutside, prometheus.GaugeValue, outside, l...)
	}
}
