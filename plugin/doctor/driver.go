package doctor

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/limitbed/limitbed/plugin/monitor/metricname"
)

// checkDriver: driver truth beside the regions'. The monitor's driver-truth accounting reads the
// driver's per-process memory (whatever code a process loaded); a container over its limit by
// that count, or a process its usage region does not list (one that does not go through
// libvgpu.so: the sign of a bypass), fails the node.
func (r *nodeRun) checkDriver(_ context.Context) Check {
	const name = "driver-truth"
	if r.metrics == nil {
		return warn(name, "skipped: the monitor's metrics cannot be read", "", "")
	}
	body := r.metrics
	if len(metricSamples(body, metricname.DriverLastPass)) == 0 {
		return warn(name, "the monitor exports no driver-truth accounting", "it runs with --accounting-interval=0, or it predates driver-truth accounting",
			"set monitor.accountingInterval (docs/configuration.md) and upgrade the chart")
	}
	region := map[string]float64{}
	for _, s := range metricSamples(body, metricname.MemoryUsed) {
		region[s.labels["pod_uid"]+"_"+s.labels["container"]+"/"+s.labels["device_index"]] = s.value
	}
	bound := map[string]float64{}
	for _, s := range metricSamples(body, metricname.DriverMemoryBound) {
		bound[s.key()] = s.value
	}
	var rows, over, unseen, strays []string
	for _, s := range metricSamples(body, metricname.DriverMemory) {
		row := fmt.Sprintf("%s on %s: driver %s", r.container(s.labels), s.labels["gpu_uuid"], mib(s.value))
		if v, ok := region[s.labels["pod_uid"]+"_"+s.labels["container"]+"/"+s.labels["device_index"]]; ok {
			row += ", region " + mib(v)
		} else {
			row += ", no region"
		}
		if b, ok := bound[s.key()]; ok {
			row += ", limit with allowance " + mib(b)
		}
		rows = append(rows, row)
	}
	for _, s := range metricSamples(body, metricname.DriverMemoryOverLimit) {
		if s.value == 1 {
			over = append(over, fmt.Sprintf("%s on %s (driver %s, limit with allowance %s)", r.container(s.labels), s.labels["gpu_uuid"],
				mib(driverBytes(body, s.key())), mib(bound[s.key()])))
		}
	}
	for _, s := range metricSamples(body, metricname.DriverProcessMemory) {
		p := fmt.Sprintf("pid %s on %s holds %s", s.labels["pid"], s.labels["gpu_uuid"], mib(s.value))
		switch {
		case s.labels["pod_uid"] == "":
			strays = append(strays, p)
		case s.labels["in_region"] == "no":
			unseen = append(unseen, p+" in "+r.container(s.labels))
		}
	}
	for _, l := range [][]string{rows, over, unseen, strays} {
		sort.Strings(l)
	}
	truth := "driver truth beside the regions': " + strings.Join(rows, "; ")
	if len(rows) == 0 {
		truth = "no container process holds GPU memory"
	}
	switch {
	case len(over) > 0:
		return fail(name, "over their limit by the driver's count: "+strings.Join(over, "; ")+". "+truth,
			"a process gets past libvgpu.so, or the container's usage region was rewritten; the Events on the pod name the process and the likely cause",
			"kubectl describe pod (Events: GPUMemoryOverLimit); set monitor.enforcement=kill to end such processes")
	case len(unseen) > 0:
		return fail(name, "processes their library does not see: "+strings.Join(unseen, "; ")+". "+truth,
			"they do not go through libvgpu.so (LD_PRELOAD of the driver, dlmopen, glibc's own dlsym, a static binary): only the node holds them to the limit",
			"find the program in the pod (kubectl exec … ps); monitor.enforcement=kill ends one that goes over")
	case len(strays) > 0:
		return warn(name, "GPU processes of no known container: "+strings.Join(strays, "; ")+". "+truth,
			"processes on the host, or of a pod the API server has not reported: reported, never killed", "check the node's own GPU processes (nvidia-smi)")
	}
	if n := metricSamples(body, metricname.DriverErrors); len(n) > 0 && n[0].value > 0 {
		return warn(name, fmt.Sprintf("the last accounting pass could not read %v devices or processes. %s", n[0].value, truth),
			"a lost GPU, or a process that ended while it was read", "read the monitor's log")
	}
	return pass(name, truth+"; none over its limit, every process seen by its library")
}

// container names a container of a metric by its pod.
func (r *nodeRun) container(l map[string]string) string {
	if n, ok := r.names[l["pod_uid"]]; ok {
		return n + "/" + l["container"]
	}
	return l["pod_uid"] + "/" + l["container"]
}

func driverBytes(body []byte, key string) float64 {
	for _, s := range metricSamples(body, metricname.DriverMemory) {
		if s.key() == key {
			return s.value
		}
	}
	return 0
}

func mib(b float64) string { return strconv.FormatFloat(b/(1<<20), 'f', 0, 64) + " MiB" }

// sample is one line of a metric.
type sample struct {
	labels map[string]string
	value  float64
}

// key names a per-container, per-GPU sample.
func (s sample) key() string {
	return s.labels["pod_uid"] + "_" + s.labels["container"] + "/" + s.labels["gpu_uuid"]
}

// metricSamples reads every sample of metric from a Prometheus text body.
func metricSamples(body []byte, metric string) []sample {
	var out []sample
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, metric)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		labels := map[string]string{}
		if rest[0] == '{' {
			l, tail, ok := strings.Cut(rest[1:], "}")
			if !ok {
				continue
			}
			labels, rest = parseLabels(l), tail
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			continue
		}
		out = append(out, sample{labels, v})
	}
	return out
}
