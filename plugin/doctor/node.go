package doctor

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/ctrexec"
	"github.com/limitbed/limitbed/plugin/delivery"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/monitor/metricname"
	"github.com/limitbed/limitbed/plugin/paths"
)

// nodeRun is what the checks of one node learn, step by step.
type nodeRun struct {
	d       *Doctor
	node    *corev1.Node
	pp      pluginPod
	pc      ctrexec.Container // the device-plugin container; nil when unreachable
	cfg     pluginConfig
	want    map[string]bool   // <podUID>_<container> of live GPU containers that should have a .limits file
	live    map[string]bool   // UIDs of the node's pods that are not gone
	names   map[string]string // pod UID -> namespace/name
	metrics []byte            // the monitor's /metrics, once read
	report  *Report
}

// Node runs the node checklist. The error is for a node that does not exist.
func (d *Doctor) Node(ctx context.Context, name string) (*Report, error) {
	n, err := d.Cluster.Kube().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", name, err)
	}
	r := &nodeRun{d: d, node: n, report: &Report{Target: "node " + name}}
	for _, step := range []func(context.Context) Check{r.checkPlugin, r.checkInstalled, r.checkLimitsFiles, r.checkMonitor, r.checkDriver} {
		r.report.add(step(ctx))
	}
	return r.report, nil
}

// checkPlugin: the plugin pod runs and kubelet advertises the resource.
func (r *nodeRun) checkPlugin(ctx context.Context) Check {
	const name = "plugin"
	cfg, err := loadPluginConfig(ctx, r.d.Cluster, r.d.PluginNamespace)
	if err != nil {
		return fail(name, err.Error(), "the plugin's configuration does not parse", "fix the ConfigMap (docs/configuration.md)")
	}
	r.cfg = cfg
	eff := v1.Resolve(cfg.device, cfg.node, r.node.Name)
	pp, err := findPluginPod(ctx, r.d.Cluster, r.d.PluginNamespace, r.node.Name)
	if err != nil {
		return fail(name, err.Error(), "the chart's DaemonSet has no pod here (node selector, taints, or another namespace)",
			"check kubectl -n "+r.d.PluginNamespace+" get ds,pods -o wide, or pass --plugin-namespace")
	}
	r.pp = pp
	if c, err := r.d.Cluster.Container(ctx, pp.pod.Namespace, pp.pod.Name, pluginContainer); err == nil {
		r.pc = c
	}
	if !podReady(pp.pod, pluginContainer) {
		return fail(name, fmt.Sprintf("plugin pod %s/%s is not ready", pp.pod.Namespace, pp.pod.Name),
			"the plugin has not registered (or crashed)", "kubectl -n "+pp.pod.Namespace+" logs "+pp.pod.Name+" -c "+pluginContainer)
	}
	res := corev1.ResourceName(eff.ResourceCountName)
	q, ok := r.node.Status.Allocatable[res]
	if !ok || q.IsZero() {
		return fail(name, fmt.Sprintf("node allocatable %s is %s", res, q.String()),
			"kubelet has no device from the plugin: registration failed, or NVML found no GPU",
			"read the plugin's log (kubectl -n "+pp.pod.Namespace+" logs "+pp.pod.Name+" -c "+pluginContainer+")")
	}
	return pass(name, fmt.Sprintf("plugin pod %s/%s ready; allocatable %s: %s; operating mode %s", pp.pod.Namespace, pp.pod.Name, res, q.String(), eff.OperatingMode))
}

// checkInstalled: libvgpu.so and ld.so.preload are on the node (read through the plugin pod).
func (r *nodeRun) checkInstalled(ctx context.Context) Check {
	const name = "library"
	if r.pc == nil {
		return warn(name, "skipped: the plugin container cannot be reached", "", "")
	}
	dir := r.pp.vgpuDir()
	lib, found, err := read(ctx, r.pc, paths.LibPath(r.pp.hookPath))
	if err != nil {
		return fail(name, err.Error(), "", "")
	}
	if !found {
		return fail(name, paths.LibPath(r.pp.hookPath)+" is not installed", "the chart's install init container did not run or failed",
			"kubectl -n "+r.pp.pod.Namespace+" logs "+r.pp.pod.Name+" -c install")
	}
	pre, found, err := read(ctx, r.pc, paths.PreloadPath(r.pp.hookPath))
	if err != nil || !found || !strings.Contains(string(pre), paths.ContainerLibPath) {
		return fail(name, paths.PreloadPath(r.pp.hookPath)+" is missing or does not name "+paths.ContainerLibPath, "the chart's install step did not finish",
			"kubectl -n "+r.pp.pod.Namespace+" logs "+r.pp.pod.Name+" -c install")
	}
	return pass(name, fmt.Sprintf("%s/libvgpu.so (sha256 %s, %d bytes) and ld.so.preload installed", dir, digest(lib), len(lib)))
}

// checkLimitsFiles: every .limits file belongs to a live pod, and every live file-mode GPU container has one.
func (r *nodeRun) checkLimitsFiles(ctx context.Context) Check {
	const name = "limits-files"
	if r.pc == nil {
		return warn(name, "skipped: the plugin container cannot be reached", "", "")
	}
	pods, err := r.d.Cluster.Kube().CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + r.node.Name})
	if err != nil {
		return fail(name, fmt.Sprintf("list the pods of node %s: %v", r.node.Name, err), "", "")
	}
	eff := v1.Resolve(r.cfg.device, r.cfg.node, r.node.Name)
	r.want, r.live, r.names = map[string]bool{}, map[string]bool{}, map[string]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		r.names[string(p.UID)] = p.Namespace + "/" + p.Name
		if p.Spec.NodeName != r.node.Name || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		r.live[string(p.UID)] = true
		if p.Status.Phase != corev1.PodRunning || annotations.Phase(p.Annotations[annotations.BindPhase]) != annotations.PhaseSuccess || eff.OperatingMode == v1.OperatingModeMIG {
			continue
		}
		dec, err := delivery.Resolve(p, delivery.Layers{Node: eff.NodeLimitDelivery, Global: eff.GlobalLimitDelivery, AllowPodOverride: eff.AllowPodLimitDeliveryOverride})
		if err != nil || dec.Mode != v1.LimitDeliveryFile {
			continue
		}
		all, err := annotations.DecodePodDevices(p.Annotations[annotations.DevicesAllocated])
		if err != nil {
			continue
		}
		ctrs := append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...)
		for i, devs := range all {
			if i < len(ctrs) && len(devs) > 0 && !strings.Contains(devs[0].UUID, "MIG-") {
				r.want[string(p.UID)+"_"+ctrs[i].Name] = true
			}
		}
	}
	dir := paths.ContainersDir(r.pp.hookPath)
	res, err := r.pc.Exec(ctx, []string{"/bin/ls", "-a", dir}, ctrexec.ExecOptions{})
	if err != nil || res.ExitCode != 0 {
		return fail(name, fmt.Sprintf("cannot list %s in the plugin pod: %v %s", dir, err, strings.TrimSpace(string(res.Stderr))), "", "")
	}
	have := map[string]bool{}
	var orphans, debris []string
	for _, e := range strings.Fields(string(res.Stdout)) {
		switch {
		case strings.HasPrefix(e, ".") && strings.Contains(e, limitsfile.TempMarker):
			debris = append(debris, e)
		case strings.HasSuffix(e, limitsfile.Suffix):
			key := strings.TrimSuffix(e, limitsfile.Suffix)
			have[key] = true
			uid, _, _ := strings.Cut(key, "_")
			if !r.live[uid] {
				orphans = append(orphans, e)
			}
		}
	}
	var missing []string
	for k := range r.want {
		if !have[k] {
			missing = append(missing, k+limitsfile.Suffix)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		return fail(name, "live file-mode GPU containers without a limits file: "+strings.Join(missing, ", "),
			"their login sessions run unlimited: the file was removed, or the pods predate file mode", "recreate those pods")
	}
	detail := fmt.Sprintf("%d limits files, every live file-mode GPU container has one", len(have))
	if len(orphans)+len(debris) > 0 {
		return warn(name, detail+fmt.Sprintf("; orphans: %s", strings.Join(append(orphans, debris...), ", ")),
			"files of pods that are gone (or of interrupted writes)", "the monitor removes them after its grace period; if they stay, check the monitor's log")
	}
	return pass(name, detail)
}

// checkMonitor: the monitor runs and exports a limit for every live container with a file.
func (r *nodeRun) checkMonitor(ctx context.Context) Check {
	const name = "monitor"
	if r.pp.pod == nil {
		return warn(name, "skipped: no plugin pod", "", "")
	}
	if !podReady(r.pp.pod, monitorContainer) {
		return fail(name, fmt.Sprintf("the %s container of %s/%s is not ready", monitorContainer, r.pp.pod.Namespace, r.pp.pod.Name),
			"nothing removes dead pods' files and no metrics are exported", "kubectl -n "+r.pp.pod.Namespace+" logs "+r.pp.pod.Name+" -c "+monitorContainer)
	}
	body, err := r.d.Cluster.ProxyGet(ctx, r.pp.pod.Namespace, r.pp.pod.Name, r.pp.metricsPort, "/metrics")
	if err != nil {
		return warn(name, err.Error(), "the API server cannot reach the monitor's port (or RBAC forbids pods/proxy)", "kubectl -n "+r.pp.pod.Namespace+" port-forward "+r.pp.pod.Name+" "+r.pp.metricsPort)
	}
	r.metrics = body
	seen := metricPodContainers(body, metricname.MemoryLimit)
	var missing []string
	for k := range r.want {
		if !seen[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		return fail(name, "the monitor exports no limit for "+strings.Join(missing, ", "),
			"it cannot read their limits files", "read the monitor's log")
	}
	return pass(name, fmt.Sprintf("/metrics on port %s: limits of %d containers", r.pp.metricsPort, len(seen)))
}
