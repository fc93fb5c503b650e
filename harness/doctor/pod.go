package doctor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/delivery"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/region"
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
	c      sandbox.Container
	lib    []byte
	vars   map[string]string // the limits file's
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

// open execs into the container once; an error stops the in-container checks.
func (r *podRun) open(ctx context.Context) error {
	if r.c != nil {
		return nil
	}
	c, err := r.d.Cluster.Container(ctx, r.pod.Namespace, r.pod.Name, r.ctr)
	if err != nil {
		return err
	}
	r.c = c
	return nil
}

// read returns a file of the container; found is false when it does not exist.
func read(ctx context.Context, c sandbox.Container, path string) (data []byte, found bool, err error) {
	res, err := c.Exec(ctx, []string{"/bin/sh", "-c", `[ -e "$1" ] || exit 3; cat "$1"`, "read", path}, sandbox.ExecOptions{})
	if err != nil {
		return nil, false, fmt.Errorf("exec in %s: %w", c, err)
	}
	switch res.ExitCode {
	case 0:
		return res.Stdout, true, nil
	case 3:
		return nil, false, nil
	default:
		return nil, false, fmt.Errorf("read %s in %s: exit %d: %s", path, c, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
}

func (r *podRun) skipped(name string) (Check, bool) {
	switch {
	case r.mig:
		return pass(name, "skipped: MIG pod"), true
	case r.stop:
		return warn(name, "skipped: an earlier check found the container unusable", "", ""), true
	}
	return Check{}, false
}

// checkPreload: /etc/ld.so.preload names libvgpu.so and the library is mounted.
func (r *podRun) checkPreload(ctx context.Context) Check {
	const name = "preload"
	if c, skip := r.skipped(name); skip {
		return c
	}
	if err := r.open(ctx); err != nil {
		r.stop = true
		return fail(name, err.Error(), "doctor cannot exec into the container", "check that the pod runs and that you may exec (pods/exec)")
	}
	pre, found, err := read(ctx, r.c, containerPreload)
	if err != nil {
		r.stop = true
		return fail(name, err.Error(), "doctor cannot read files in the container (no sh or cat?)", "use an image with a shell")
	}
	fixMounts := "recreate the pod on a node whose device plugin runs (kubectl -n " + r.d.PluginNamespace + " get pods -o wide); the plugin adds the mounts in Allocate"
	if !found {
		return fail(name, containerPreload+" does not exist", "the plugin's preload mount is missing: no process loads libvgpu.so, nothing is limited", fixMounts)
	}
	if !strings.Contains(string(pre), containerLibPath) {
		return fail(name, fmt.Sprintf("%s does not name %s: %q", containerPreload, containerLibPath, strings.TrimSpace(string(pre))),
			"the image's own ld.so.preload shadows the plugin's, or the mount is missing", fixMounts)
	}
	lib, found, err := read(ctx, r.c, containerLibPath)
	if err != nil {
		return fail(name, err.Error(), "", "")
	}
	if !found {
		return fail(name, containerLibPath+" does not exist", "the library mount is missing: the loader skips the preload entry", fixMounts)
	}
	r.lib = lib
	return pass(name, fmt.Sprintf("%s names %s (%d bytes)", containerPreload, containerLibPath, len(lib)))
}

// checkLibrary: the container's libvgpu.so is the build the plugin installed on the node.
func (r *podRun) checkLibrary(ctx context.Context) Check {
	const name = "library"
	if c, skip := r.skipped(name); skip {
		return c
	}
	if r.lib == nil {
		return warn(name, "skipped: no library in the container", "", "")
	}
	pp, err := findPluginPod(ctx, r.d.Cluster, r.d.PluginNamespace, r.pod.Spec.NodeName)
	if err != nil {
		return warn(name, "cannot compare with the node's library: "+err.Error(), "", "pass --plugin-namespace, the namespace of the chart's DaemonSet")
	}
	pc, err := r.d.Cluster.Container(ctx, pp.pod.Namespace, pp.pod.Name, pluginContainer)
	if err != nil {
		return warn(name, "cannot exec into the plugin pod: "+err.Error(), "", "")
	}
	hostLib := pp.vgpuDir() + "/libvgpu.so"
	node, found, err := read(ctx, pc, hostLib)
	if err != nil || !found {
		return fail(name, fmt.Sprintf("the node has no %s (read through %s/%s: %v)", hostLib, pp.pod.Namespace, pp.pod.Name, err),
			"the chart's install step did not put the library on the node", "check the install init container's log of the plugin pod")
	}
	mine, theirs := digest(r.lib), digest(node)
	if mine != theirs {
		return fail(name, fmt.Sprintf("the container's libvgpu.so (sha256 %s, %d bytes) is not the node's %s (sha256 %s, %d bytes)", mine, len(r.lib), hostLib, theirs, len(node)),
			"a library from another build: the pod started before the library was upgraded, or something else mounts one",
			"restart the pod so that it gets the node's library; restart every GPU pod of a node whose library changed")
	}
	return pass(name, fmt.Sprintf("sha256 %s, the node's %s", mine, hostLib))
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])[:16]
}

// checkLimitsFile: in file mode /overrideEnv is there, read-only, parses, matches the scheduler's
// decision, and the container's environment agrees with it.
func (r *podRun) checkLimitsFile(ctx context.Context) Check {
	const name = "limits-file"
	if c, skip := r.skipped(name); skip {
		return c
	}
	if err := r.open(ctx); err != nil {
		return fail(name, err.Error(), "", "")
	}
	envRes, err := r.c.Exec(ctx, []string{"env"}, sandbox.ExecOptions{})
	if err != nil {
		return fail(name, err.Error(), "", "")
	}
	r.env = parseEnv(envRes.Stdout)
	if v := r.env["CUDA_DISABLE_CONTROL"]; v == "true" || v == "1" {
		return fail(name, "the container sets CUDA_DISABLE_CONTROL="+v, "the library enforces nothing in processes that carry it", "remove CUDA_DISABLE_CONTROL from the container spec")
	}
	data, found, err := read(ctx, r.c, containerLimitsFile)
	if err != nil {
		return fail(name, err.Error(), "", "")
	}
	if !found {
		if r.mode == v1.LimitDeliveryEnv {
			return warn(name, "env mode: no "+containerLimitsFile+"; the limits are in the environment only",
				"login sessions (ssh, su -, sudo, cron) start without the environment and run unlimited", "switch the pod to file mode (see delivery) and recreate it")
		}
		return fail(name, containerLimitsFile+" does not exist in file mode",
			"the plugin that allocated the pod did not write the file (an older plugin, or a pod older than file mode)", "recreate the pod")
	}
	if ro, found := mountReadOnly(ctx, r.c, containerLimitsFile); found && !ro {
		return fail(name, containerLimitsFile+" is mounted read-write", "a process in the container could change its own limits", "the plugin mounts it read-only; recreate the pod with this chart's plugin")
	}
	p := limitsfile.Parse(data)
	r.vars = p.Vars
	if len(p.Bad) > 0 {
		var bad []string
		for _, b := range p.Bad {
			bad = append(bad, fmt.Sprintf("line %d: %s", b.Number, b.Reason))
		}
		return fail(name, "malformed limits file: "+strings.Join(bad, "; "),
			"the file was not written by the plugin (hand-edited or damaged); the library skips these lines", "recreate the pod: the plugin writes a new file in Allocate")
	}
	if v := p.Vars[limitsfile.FormatKey]; v != limitsfile.FormatVersion {
		return fail(name, fmt.Sprintf("%s=%q, want %s", limitsfile.FormatKey, v, limitsfile.FormatVersion), "not a limits file of this format", "recreate the pod")
	}
	for i, dv := range r.devs {
		key := fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT_%d", i)
		got, err := limitsfile.ParseMemory(p.Vars[key])
		if err != nil || got != uint64(dv.UsedMem)<<20 {
			return fail(name, fmt.Sprintf("%s=%q, the scheduler assigned %d MiB", key, p.Vars[key], dv.UsedMem),
				"the file does not carry the scheduler's limit", "recreate the pod")
		}
	}
	if len(r.devs) > 0 {
		if got, want := p.Vars["CUDA_DEVICE_SM_LIMIT"], strconv.Itoa(int(r.devs[0].UsedCores)); got != want {
			return fail(name, fmt.Sprintf("CUDA_DEVICE_SM_LIMIT=%q, the scheduler assigned %s%% (device 0 speaks for all)", got, want),
				"the file does not carry the scheduler's compute limit", "recreate the pod")
		}
	}
	var differ []string
	for _, k := range sortedKeys(p.Vars) {
		if k == limitsfile.FormatKey {
			continue
		}
		if ev, ok := r.env[k]; ok && ev != p.Vars[k] {
			differ = append(differ, fmt.Sprintf("%s: file %q, environment %q", k, p.Vars[k], ev))
		}
	}
	if len(differ) > 0 {
		return fail(name, "the environment disagrees with the limits file: "+strings.Join(differ, "; "),
			"the container spec overrides the plugin's variables; the file wins in processes of the new library, the environment in old ones", "remove those variables from the container spec")
	}
	r.cache = p.Vars["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
	return pass(name, fmt.Sprintf("%s read-only, %d variables, memory limits as assigned, environment agrees", containerLimitsFile, len(p.Vars)))
}

// mountReadOnly reads the container's mount table for path.
func mountReadOnly(ctx context.Context, c sandbox.Container, path string) (ro, found bool) {
	data, ok, err := read(ctx, c, "/proc/self/mountinfo")
	if err != nil || !ok {
		return false, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[4] == path {
			ro, found = false, true
			for _, o := range strings.Split(f[5], ",") {
				if o == "ro" {
					ro = true
				}
			}
		}
	}
	return ro, found
}

// checkUsageCache: the pod's usage region decodes, carries the limits, and who is in it.
func (r *podRun) checkUsageCache(ctx context.Context) Check {
	const name = "usage-cache"
	if c, skip := r.skipped(name); skip {
		return c
	}
	if err := r.open(ctx); err != nil {
		return fail(name, err.Error(), "", "")
	}
	path := r.cache
	if path == "" {
		path = r.env["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
	}
	if path == "" {
		path = defaultUsageCache
	}
	data, found, err := read(ctx, r.c, path)
	if err != nil {
		return fail(name, err.Error(), "", "")
	}
	if !found {
		return warn(name, path+" does not exist yet", "no process of the container has initialised the library (no CUDA or NVML call yet)", "")
	}
	reg, err := region.Decode(data, region.Options{})
	if err != nil {
		return fail(name, fmt.Sprintf("%s: %v", path, err), "the region is damaged or of a layout no library here writes", "stop the container's GPU processes and restart the pod")
	}
	for i, dv := range r.devs {
		if i >= len(reg.Devices) {
			break
		}
		d := reg.Devices[i]
		if want := uint64(dv.UsedMem) << 20; d.Unlimited || d.LimitBytes != want {
			got := "unlimited"
			if !d.Unlimited {
				got = fmt.Sprintf("%d MiB", d.LimitBytes>>20)
			}
			return fail(name, fmt.Sprintf("%s (%s layout) carries %s for device %d, the limit is %d MiB", path, reg.Layout.Name, got, i, dv.UsedMem),
				"the first process stamped other limits (first writer wins): it started without the limits",
				"stop every GPU process of the container (or restart the pod) so that the region is created again")
		}
	}
	var pids []string
	for _, s := range reg.Live() {
		pids = append(pids, strconv.Itoa(int(s.PID)))
	}
	who := "no live process"
	if len(pids) > 0 {
		who = "pids " + strings.Join(pids, ",")
	}
	return pass(name, fmt.Sprintf("%s: %s layout %d.%d, limits as assigned, %s", path, reg.Layout.Name, reg.Layout.Major, reg.Layout.Minor, who))
}

// gpuTool returns the command line that prints the GPUs' memory totals: tool when given, else
// gpuinfo or nvidia-smi from the container's PATH.
func gpuTool(ctx context.Context, c sandbox.Container, tool string) (string, error) {
	p := tool
	if p == "" {
		res, err := c.Exec(ctx, []string{"sh", "-c", "command -v gpuinfo || command -v nvidia-smi"}, sandbox.ExecOptions{})
		if err != nil {
			return "", fmt.Errorf("exec in %s: %w", c, err)
		}
		p = strings.TrimSpace(string(res.Stdout))
	}
	switch {
	case strings.HasSuffix(p, "gpuinfo"):
		return p + " --json", nil
	case strings.HasSuffix(p, "nvidia-smi"):
		return p + " --query-gpu=memory.total --format=csv,noheader,nounits", nil
	}
	if tool != "" {
		return "", fmt.Errorf("--gpu-tool %q is neither gpuinfo nor nvidia-smi", tool)
	}
	return "", errNoTool
}

var errNoTool = errors.New("neither gpuinfo nor nvidia-smi is in the container's PATH (or give --gpu-tool)")

func (r *podRun) compareView(name, session string, out []byte, code int) Check {
	if code != 0 {
		return fail(name, fmt.Sprintf("the GPU tool exited %d in the %s session: %s", code, session, strings.TrimSpace(string(out))), "", "")
	}
	totals, err := parseTotals(out)
	if err != nil {
		return fail(name, fmt.Sprintf("%s session: %v", session, err), "", "")
	}
	var seen []string
	for i, dv := range r.devs {
		if i >= len(totals) {
			return fail(name, fmt.Sprintf("the %s session sees %d devices, the pod has %d", session, len(totals), len(r.devs)), "", "")
		}
		seen = append(seen, fmt.Sprintf("%d MiB", totals[i]))
		if totals[i] != uint64(dv.UsedMem) {
			cause := "the library is not loaded in this session, or it did not get the limit"
			fix := "see the checks above"
			if session == "login" {
				cause = "a login session has no environment: the limit reaches it only through " + containerLimitsFile
				if r.mode == v1.LimitDeliveryEnv {
					cause += ", and the pod runs in env mode"
					fix = "switch the pod to file mode (see delivery) and recreate it"
				} else {
					fix = "check limits-file and library above: an old library reads the file too late"
				}
			}
			return fail(name, fmt.Sprintf("the %s session sees %d MiB on device %d, the limit is %d MiB", session, totals[i], i, dv.UsedMem), cause, fix)
		}
	}
	return pass(name, fmt.Sprintf("the %s session sees %s, the limit", session, strings.Join(seen, ", ")))
}

// checkExecView: what a process started through the runtime (kubectl exec) sees.
func (r *podRun) checkExecView(ctx context.Context) Check {
	const name = "exec-view"
	if c, skip := r.skipped(name); skip {
		return c
	}
	if err := r.open(ctx); err != nil {
		return fail(name, err.Error(), "", "")
	}
	cmd, err := gpuTool(ctx, r.c, r.d.GPUTool)
	if err != nil {
		return warn(name, err.Error(), "", "add gpuinfo or nvidia-smi to the image to compare what processes see")
	}
	res, err := r.c.Exec(ctx, []string{"sh", "-c", cmd}, sandbox.ExecOptions{})
	if err != nil {
		return fail(name, err.Error(), "", "")
	}
	return r.compareView(name, "exec", res.Stdout, res.ExitCode)
}

// checkLoginView: what a process started from a login session (su -, as ssh gives) sees.
func (r *podRun) checkLoginView(ctx context.Context) Check {
	const name = "login-view"
	if c, skip := r.skipped(name); skip {
		return c
	}
	if err := r.open(ctx); err != nil {
		return fail(name, err.Error(), "", "")
	}
	cmd, err := gpuTool(ctx, r.c, r.d.GPUTool)
	if err != nil {
		return warn(name, err.Error(), "", "add gpuinfo or nvidia-smi to the image to compare what processes see")
	}
	res, err := r.d.login()(ctx, r.c, cmd)
	if errors.Is(err, sandbox.ErrUnsupported) {
		return warn(name, "no login session: "+err.Error(), "", "install su (and a user "+sandbox.TenantUser+") in the image to check login sessions")
	}
	if err != nil {
		return warn(name, "no login session: "+err.Error(), "", "")
	}
	return r.compareView(name, "login", res.Stdout, res.ExitCode)
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
