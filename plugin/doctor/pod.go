package doctor

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/ctrexec"
	"github.com/limitbed/limitbed/plugin/delivery"
)

// Resource names of HAMi's scheduler (memory in MiB, cores in percent).
const (
	resourceMem   = "nvidia.com/gpumem"
	resourceCores = "nvidia.com/gpucores"
)

// podRun is what the checks of one pod learn, step by step.
type podRun struct {
	d      *Doctor
	pod    *corev1.Pod
	ctr    string
	index  int // the container's entry in the device annotations: init containers first
	cfg    pluginConfig
	cfgErr error
	devs   annotations.ContainerDevices
	mig    bool
	mode   v1.LimitDelivery
	c      ctrexec.Container
	lib    []byte
	env    map[string]string // the exec session's
	cache  string
	stop   bool // a check found the container unusable; later in-container checks are skipped
	report *Report
}

// Pod runs the pod checklist against container ctr of pod ns/name ("" = the first container).
// The error is for a target that cannot be checked at all (no such pod or container).
func (d *Doctor) Pod(ctx context.Context, ns, name, ctr string) (*Report, error) {
	pod, err := d.Cluster.Kube().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", ns, name, err)
	}
	r := &podRun{d: d, pod: pod, ctr: ctr, index: -1}
	for i, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if (ctr == "" && i >= len(pod.Spec.InitContainers)) || c.Name == ctr {
			r.ctr, r.index = c.Name, i
			break
		}
	}
	if r.index < 0 {
		return nil, fmt.Errorf("pod %s/%s has no container %q", ns, name, ctr)
	}
	r.report = &Report{Target: "pod " + ns + "/" + name + " container " + r.ctr}
	// The chart's configuration names the resource (resources) and the delivery layers (delivery).
	r.cfg, r.cfgErr = loadPluginConfig(ctx, d.Cluster, d.PluginNamespace)
	for _, step := range []func(context.Context) Check{
		r.checkResources, r.checkAnnotations, r.checkDelivery, r.checkPreload, r.checkLibrary,
		r.checkLimitsFile, r.checkUsageCache, r.checkExecView, r.checkLoginView,
	} {
		r.report.add(step(ctx))
	}
	return r.report, nil
}

func (r *podRun) container() *corev1.Container {
	all := append(append([]corev1.Container{}, r.pod.Spec.InitContainers...), r.pod.Spec.Containers...)
	return &all[r.index]
}

// checkResources: the container asks for a GPU, and says how much memory and compute.
func (r *podRun) checkResources(context.Context) Check {
	const name = "resources"
	c := r.container()
	get := func(res corev1.ResourceName) (resource.Quantity, bool) {
		if q, ok := c.Resources.Limits[res]; ok {
			return q, true
		}
		q, ok := c.Resources.Requests[res]
		return q, ok
	}
	res := v1.Resolve(r.cfg.device, r.cfg.node, r.pod.Spec.NodeName).ResourceCountName
	gpu, ok := get(corev1.ResourceName(res))
	if !ok || gpu.IsZero() {
		return fail(name, fmt.Sprintf("container %s asks for no %s", r.ctr, res),
			"without the GPU resource the scheduler assigns no device and the plugin delivers no limit",
			fmt.Sprintf("add resources.limits: {%s: 1, %s: <MiB>, %s: <percent>}", res, resourceMem, resourceCores))
	}
	parts := []string{fmt.Sprintf("%s: %s", res, gpu.String())}
	if q, ok := get(resourceMem); ok {
		parts = append(parts, fmt.Sprintf("%s: %d MiB", resourceMem, q.Value()))
	} else {
		parts = append(parts, resourceMem+": unset (the scheduler's default memory)")
	}
	if q, ok := get(resourceCores); ok {
		parts = append(parts, fmt.Sprintf("%s: %d%%", resourceCores, q.Value()))
	}
	return pass(name, strings.Join(parts, ", "))
}

// checkAnnotations: the scheduler's decision is there, for this node, and the bind completed.
func (r *podRun) checkAnnotations(context.Context) Check {
	const name = "annotations"
	a := r.pod.Annotations
	raw, has := a[annotations.DevicesAllocated]
	if !has {
		return fail(name, "no "+annotations.DevicesAllocated+" annotation",
			"the pod did not go through HAMi's scheduler, so no device and no limit was assigned",
			"set schedulerName: hami-scheduler (HAMi's webhook does it for pods asking for "+v1.DefaultResourceCountName+") and check the resource names")
	}
	all, err := annotations.DecodePodDevices(raw)
	if err != nil {
		return fail(name, fmt.Sprintf("%s does not decode: %v", annotations.DevicesAllocated, err),
			"the scheduler's annotation is damaged", "recreate the pod")
	}
	if r.index >= len(all) || len(all[r.index]) == 0 {
		return fail(name, fmt.Sprintf("%s has no device for container %s (entry %d of %d)", annotations.DevicesAllocated, r.ctr, r.index, len(all)),
			"the scheduler assigned this container no device", "check the container's GPU resources")
	}
	r.devs = all[r.index]
	for _, dv := range r.devs {
		if strings.Contains(dv.UUID, "MIG-") {
			r.mig = true
		}
	}
	if n := a[annotations.VGPUNode]; n != "" && n != r.pod.Spec.NodeName {
		return fail(name, fmt.Sprintf("%s is %s but the pod runs on %s", annotations.VGPUNode, n, r.pod.Spec.NodeName),
			"the scheduler's decision is for another node: this node's plugin will not allocate it", "recreate the pod")
	}
	switch p := annotations.Phase(a[annotations.BindPhase]); {
	case p == annotations.PhaseSuccess:
	case p == annotations.PhaseAllocating && r.mig:
		// Static MIG instances are kubelet's own device IDs: the plugin hands them over without
		// consuming the annotation's entry, so the phase stays allocating.
	case p == annotations.PhaseFailed:
		return fail(name, annotations.BindPhase+" is failed",
			"the device plugin's Allocate failed (e.g. the limits file could not be written)",
			"read the plugin's log on node "+r.pod.Spec.NodeName+" (kubectl -n "+r.d.PluginNamespace+" logs <plugin pod> -c "+pluginContainer+") and recreate the pod")
	default:
		return fail(name, fmt.Sprintf("%s is %q, not success", annotations.BindPhase, a[annotations.BindPhase]),
			"kubelet has not had the plugin allocate this pod's devices", "wait for the pod to start; if it stays, read the plugin's log")
	}
	var devs []string
	for i, dv := range r.devs {
		devs = append(devs, fmt.Sprintf("device %d %s %d MiB %d%%", i, dv.UUID, dv.UsedMem, dv.UsedCores))
	}
	return pass(name, "bind-phase "+a[annotations.BindPhase]+" on "+r.pod.Spec.NodeName+"; "+strings.Join(devs, ", "))
}

// checkDelivery: the limitDelivery that applies to the pod, and the layer it came from.
func (r *podRun) checkDelivery(ctx context.Context) Check {
	const name = "delivery"
	if r.cfgErr != nil {
		return fail(name, r.cfgErr.Error(), "the plugin's configuration does not parse; the plugin itself would refuse to start", "fix the ConfigMap (docs/configuration.md)")
	}
	eff := v1.Resolve(r.cfg.device, r.cfg.node, r.pod.Spec.NodeName)
	from := r.cfg.from
	if from == "" {
		from = "no chart ConfigMap in namespace " + r.d.PluginNamespace + ": defaults assumed"
	}
	if eff.OperatingMode == v1.OperatingModeMIG || r.mig {
		r.mig = true
		return warn(name, "MIG: the node hands out MIG instances ("+from+")",
			"MIG pods get no limits file, no libvgpu.so and no preload: the hardware isolates the instance",
			"nothing to fix for a MIG pod; the in-container checks below are skipped")
	}
	dec, err := delivery.Resolve(r.pod, delivery.Layers{Node: eff.NodeLimitDelivery, Global: eff.GlobalLimitDelivery, AllowPodOverride: eff.AllowPodLimitDeliveryOverride})
	if err != nil {
		return fail(name, err.Error(), "the plugin refuses to allocate a pod with this annotation", "set "+annotations.LimitDelivery+" to file or env, or remove it")
	}
	r.mode = dec.Mode
	detail := fmt.Sprintf("limitDelivery %s from the %s (%s)", dec.Mode, dec.Source, from)
	if dec.Ignored {
		detail += "; the pod's " + annotations.LimitDelivery + "=env is ignored: the admin gate is closed"
	}
	if dec.Mode == v1.LimitDeliveryEnv {
		return warn(name, detail, "env delivery: processes started from login sessions (ssh, su -, sudo, cron) run without limits",
			fixForEnv(dec.Source))
	}
	return pass(name, detail)
}

func fixForEnv(s delivery.Source) string {
	switch s {
	case delivery.SourcePodAnnotation:
		return "remove the pod's " + annotations.LimitDelivery + " annotation (or set it to file) and recreate the pod"
	case delivery.SourceNodeConfig:
		return "drop limitdelivery: env from the node's nodeConfig entry (helm upgrade) and recreate the pod"
	default:
		return "set devicePlugin.limitDelivery=file (helm upgrade) and recreate the pod"
	}
}

func parseEnv(b []byte) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && k != "" {
			out[k] = v
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
