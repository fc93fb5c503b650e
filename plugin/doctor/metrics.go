package doctor

import "strings"

// metricPodContainers returns "<pod_uid>_<container>" of every sample of metric in a Prometheus
// text exposition. Lines that are not samples of metric are skipped.
func metricPodContainers(body []byte, metric string) map[string]bool {
	out := map[string]bool{}
	for _, s := range metricSamples(body, metric) {
		if s.labels["pod_uid"] != "" && s.labels["container"] != "" {
			out[s.labels["pod_uid"]+"_"+s.labels["container"]] = true
		}
	}
	return out
}

// parseLabels reads `a="x",b="y"` (the values this exporter writes need no escapes; an escaped
// quote ends nothing early because \" is kept with the value).
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		k, rest, ok := strings.Cut(s, `="`)
		if !ok {
			break
		}
		var v strings.Builder
		i := 0
		for ; i < len(rest); i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				v.WriteByte(rest[i+1])
				i++
				continue
			}
			if rest[i] == '"' {
				break
			}
			v.WriteByte(rest[i])
		}
		out[strings.TrimSpace(k)] = v.String()
		if i >= len(rest) {
			break
		}
		s = strings.TrimPrefix(rest[i+1:], ",")
	}
	return out
}
