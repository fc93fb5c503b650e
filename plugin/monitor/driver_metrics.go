package monitor

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitbed/limitbed/plugin/monitor/metricname"
)

var (
	driverLabels   = []string{"pod_uid", "container", "gpu_uuid", "device_index"}
	descDriverUsed = prometheus.NewDesc(metricname.DriverMemory,
		"GPU memory a container's processes hold on a GPU by the driver's count (nvmlDeviceGetComputeRunningProcesses), whatever they loaded; device_index is the GPU's index in the container, -1 for a GPU it was not given.",
		driverLabels, nil)
	descDriverBound = prometheus.NewDesc(metricname.DriverMemoryBound,
		"What a container may hold on a GPU by the driver's count: its memory limit plus the context allowance of each of its processes there (absent when it has no limit there).",
		driverLabels, nil)
	descDriverOver = prometheus.NewDesc(metricname.DriverMemoryOverLimit,
		"1 when a container holds more on a GPU than its limit plus its processes' context allowance, by the driver's count (absent when it has no limit there).",
		driverLabels, nil)
	descDriverProcs = prometheus.NewDesc(metricname.DriverProcesses,
		"Processes of a container the driver lists on a GPU.",
		driverLabels, nil)
	descDriverProcess = prometheus.NewDesc(metricname.DriverProcessMemory,
		"GPU memory of one process by the driver's count, with its container (empty: no known container) and whether its container's usage region lists it (in_region: yes, no = it does not go through libvgpu.so, empty = not known).",
		[]string{"gpu_uuid", "pid", "pod_uid", "container", "in_region"}, nil)
	descUnattributed = prometheus.NewDesc(metricname.DriverUnattributed,
		"GPU memory of processes that belong to no known container (the host, a pod the API server has not reported), or whose PID names another process than the one the driver's record was first seen with: reported, never killed.",
		[]string{"gpu_uuid"}, nil)
	descDriverKills = prometheus.NewDesc(metricname.DriverKills,
		"Processes the monitor killed (enforcement: kill) for putting their container over its GPU memory limit.",
		[]string{"pod_uid", "container"}, nil)
	descDriverChanged = prometheus.NewDesc(metricname.DriverPIDChanged,
		"Records of the driver's process list whose PID named another process than the one the record was first seen with (at=attribution: not attributed to the new process's container), and offenders whose PID no longer named the judged process just before the signal (at=kill): never signalled.",
		[]string{"at"}, nil)
	descDriverErrors = prometheus.NewDesc(metricname.DriverErrors,
		"Devices or processes the last accounting pass could not read (or 1 when the identity could not be read).",
		nil, nil)
	descDriverPass = prometheus.NewDesc(metricname.DriverLastPass,
		"When the last driver-truth accounting pass completed.",
		nil, nil)
)

// DriverCollector exports the last accounting pass.
type DriverCollector struct {
	Accounting *Accounting
}

var _ prometheus.Collector = (*DriverCollector)(nil)

// Describe implements prometheus.Collector.
func (d *DriverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{descDriverUsed, descDriverBound, descDriverOver, descDriverProcs, descDriverProcess,
		descUnattributed, descDriverKills, descDriverChanged, descDriverErrors, descDriverPass} {
		ch <- x
	}
}

// Collect implements prometheus.Collector.
func (d *DriverCollector) Collect(ch chan<- prometheus.Metric) {
	for k, n := range d.Accounting.kills() {
		ch <- prometheus.MustNewConstMetric(descDriverKills, prometheus.CounterValue, float64(n), string(k.PodUID), k.Container)
	}
	for at, n := range d.Accounting.changedCounts() {
		ch <- prometheus.MustNewConstMetric(descDriverChanged, prometheus.CounterValue, float64(n), at)
	}
	rep := d.Accounting.Last()
	if rep == nil {
		return
	}
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	gauge(descDriverErrors, float64(len(rep.Errors)))
	gauge(descDriverPass, float64(rep.Taken.UnixNano())/1e9)
	for _, u := range rep.Usage {
		l := []string{string(u.Container.PodUID), u.Container.Container, u.GPU, strconv.Itoa(u.Index)}
		gauge(descDriverUsed, float64(u.UsedBytes), l...)
		gauge(descDriverProcs, float64(len(u.Processes)), l...)
		if u.Judged {
			gauge(descDriverBound, float64(u.BoundBytes), l...)
			over := 0.0
			if u.Over {
				over = 1
			}
			gauge(descDriverOver, over, l...)
		}
		for _, p := range u.Processes {
			gauge(descDriverProcess, float64(p.UsedBytes), p.GPU, strconv.Itoa(p.PID), string(u.Container.PodUID), u.Container.Container, p.InRegion)
		}
	}
	stray := map[string]float64{}
	for _, p := range append(rep.Unattributed[:len(rep.Unattributed):len(rep.Unattributed)], rep.Changed...) {
		stray[p.GPU] += float64(p.UsedBytes)
		gauge(descDriverProcess, float64(p.UsedBytes), p.GPU, strconv.Itoa(p.PID), "", "", "")
	}
	for g, b := range stray {
		gauge(descUnattributed, b, g)
	}
}
