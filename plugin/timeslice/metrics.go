package timeslice

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitbed/limitbed/plugin/monitor/metricname"
)

var (
	descUsed = prometheus.NewDesc(metricname.SchedulerGPUSeconds,
		"GPU time charged to a container's slices on a GPU (overlapping drains halved)", []string{"gpu", "container"}, nil)
	descSlices = prometheus.NewDesc(metricname.SchedulerSlices,
		"slices granted to a container on a GPU", []string{"gpu", "container"}, nil)
	descWait = prometheus.NewDesc(metricname.SchedulerMaxWait,
		"the longest a container owed a slice waited for it", []string{"gpu", "container"}, nil)
	descSwitches = prometheus.NewDesc(metricname.SchedulerSwitches,
		"slices granted on a GPU", []string{"gpu"}, nil)
	descOverlaps = prometheus.NewDesc(metricname.SchedulerOverlaps,
		"slices that started before the last one's work drained (a kernel longer than the drain wait)", []string{"gpu"}, nil)
	descIdle = prometheus.NewDesc(metricname.SchedulerOwedIdle,
		"time no slice ran while a container was owed one", []string{"gpu"}, nil)
	descSpeed = prometheus.NewDesc(metricname.SchedulerSpeed,
		"the GPU's speed against full load that slices are charged by (its SM clock over the clock at full load; 1 when not known)", []string{"gpu"}, nil)
	descClock = prometheus.NewDesc(metricname.SchedulerSMClock,
		"the GPU's SM clock as the scheduler last read it (smoothed; 0: not read)", []string{"gpu"}, nil)
	descFullClock = prometheus.NewDesc(metricname.SchedulerFullLoadClock,
		"the GPU's SM clock at full load, as last learned (0: not known)", []string{"gpu"}, nil)
	descCalibrations = prometheus.NewDesc(metricname.SchedulerCalibrations,
		"times the GPU was filled with its limited containers' slices to learn its clock at full load", []string{"gpu"}, nil)
)

// Collector exports the node's scheduling figures.
type Collector struct {
	Node *Node
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUsed, descSlices, descWait, descSwitches, descOverlaps, descIdle,
		descSpeed, descClock, descFullClock, descCalibrations} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for u, r := range c.Node.Stats() {
		gpu := u.String()
		ch <- prometheus.MustNewConstMetric(descSwitches, prometheus.CounterValue, float64(r.GPU.Switches), gpu)
		ch <- prometheus.MustNewConstMetric(descOverlaps, prometheus.CounterValue, float64(r.GPU.Overlaps), gpu)
		ch <- prometheus.MustNewConstMetric(descIdle, prometheus.CounterValue, r.GPU.Idle.Seconds(), gpu)
		ch <- prometheus.MustNewConstMetric(descSpeed, prometheus.GaugeValue, r.Speed, gpu)
		ch <- prometheus.MustNewConstMetric(descClock, prometheus.GaugeValue, r.ClockMHz, gpu)
		ch <- prometheus.MustNewConstMetric(descFullClock, prometheus.GaugeValue, r.FullLoadMHz, gpu)
		ch <- prometheus.MustNewConstMetric(descCalibrations, prometheus.CounterValue, float64(r.GPU.Calibrations), gpu)
		for key, s := range r.Seats {
			ch <- prometheus.MustNewConstMetric(descUsed, prometheus.CounterValue, s.Used.Seconds(), gpu, key)
			ch <- prometheus.MustNewConstMetric(descSlices, prometheus.CounterValue, float64(s.Slices), gpu, key)
			ch <- prometheus.MustNewConstMetric(descWait, prometheus.GaugeValue, s.MaxWait.Seconds(), gpu, key)
		}
	}
}
