package script

import (
	"fmt"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/limitbed/limitbed/plugin/monitor"
	"github.com/limitbed/limitbed/plugin/paths"
)

// monitorScrape runs one metrics scrape of the vGPU monitor (plugin/monitor's Collector) over the
// node's containers directory and prints one line per per-container metric, sorted:
// "POD METRIC LABEL=VALUE... VALUE", POD being the pod's name in this script (its UID if unknown),
// without the hami_container_ prefix and the pod_uid/container labels.
func monitorScrape(ts *testscript.TestScript, st *state) {
	c := &monitor.Collector{Dir: paths.ContainersDir(st.node.HookPath), Usage: monitor.RegionFiles{},
		Logger: logr.FromSlogHandler(st.logger.Handler())}
	reg := prometheus.NewRegistry()
	ts.Check(reg.Register(c))
	mfs, err := reg.Gather()
	ts.Check(err)
	names := map[string]string{}
	for name, p := range st.pods {
		names[p.UID] = name
	}
	var lines []string
	for _, mf := range mfs {
		metric := strings.TrimPrefix(mf.GetName(), "hami_container_")
		for _, m := range mf.GetMetric() {
			pod := ""
			var labels []string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "pod_uid":
					pod = l.GetValue()
					if n, ok := names[pod]; ok {
						pod = n
					}
				case "container":
				default:
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
			}
			fields := append([]string{pod, metric}, labels...)
			lines = append(lines, fmt.Sprintf("%s %g", strings.Join(fields, " "), m.GetGauge().GetValue()))
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Fprintln(ts.Stdout(), l)
	}
}
