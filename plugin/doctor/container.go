package doctor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/ctrexec"
	"github.com/limitbed/limitbed/plugin/libvars"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/region"
)

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
func read(ctx context.Context, c ctrexec.Container, path string) (data []byte, found bool, err error) {
	res, err := c.Exec(ctx, []string{"/bin/sh", "-c", `[ -e "$1" ] || exit 3; cat "$1"`, "read", path}, ctrexec.ExecOptions{})
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
	pre, found, err := read(ctx, r.c, paths.ContainerPreloadPath)
	if err != nil {
		r.stop = true
		return fail(name, err.Error(), "doctor cannot read files in the container (no sh or cat?)", "use an image with a shell")
	}
	fixMounts := "recreate the pod on a node whose device plugin runs (kubectl -n " + r.d.PluginNamespace + " get pods -o wide); the plugin adds the mounts in Allocate"
	if !found {
		return fail(name, paths.ContainerPreloadPath+" does not exist", "the plugin's preload mount is missing: no process loads libvgpu.so, nothing is limited", fixMounts)
	}
	if !strings.Contains(string(pre), paths.ContainerLibPath) {
		return fail(name, fmt.Sprintf("%s does not name %s: %q", paths.ContainerPreloadPath, paths.ContainerLibPath, strings.TrimSpace(string(pre))),
			"the image's own ld.so.preload shadows the plugin's, or the mount is missing", fixMounts)
	}
	lib, found, err := read(ctx, r.c, paths.ContainerLibPath)
	if err != nil {
		return fail(name, err.Error(), "", "")
	}
	if !found {
		return fail(name, paths.ContainerLibPath+" does not exist", "the library mount is missing: the loader skips the preload entry", fixMounts)
	}
	r.lib = lib
	return pass(name, fmt.Sprintf("%s names %s (%d bytes)", paths.ContainerPreloadPath, paths.ContainerLibPath, len(lib)))
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
	hostLib := paths.LibPath(pp.hookPath)
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
	envRes, err := r.c.Exec(ctx, []string{"env"}, ctrexec.ExecOptions{})
	if err != nil {
		return fail(name, err.Error(), "", "")
	}
	r.env = parseEnv(envRes.Stdout)
	if v := r.env["CUDA_DISABLE_CONTROL"]; v == "true" || v == "1" {
		return fail(name, "the container sets CUDA_DISABLE_CONTROL="+v, "the library enforces nothing in processes that carry it", "remove CUDA_DISABLE_CONTROL from the container spec")
	}
	data, found, err := read(ctx, r.c, limitsfile.ContainerMountPath)
	if err != nil {
		return fail(name, err.Error(), "", "")
	}
	if !found {
		return r.noLimitsFile(name)
	}
	if ro, found := mountReadOnly(ctx, r.c, limitsfile.ContainerMountPath); found && !ro {
		return fail(name, limitsfile.ContainerMountPath+" is mounted read-write", "a process in the container could change its own limits", "the plugin mounts it read-only; recreate the pod with this chart's plugin")
	}
	p := limitsfile.Parse(data)
	if c, bad := r.fileAgainstDecision(name, p); bad {
		return c
	}
	if c, bad := r.envAgainstFile(name, p); bad {
		return c
	}
	r.cache = p.Vars[libvars.SharedCache]
	return pass(name, fmt.Sprintf("%s read-only, %d variables, memory limits as assigned, environment agrees", limitsfile.ContainerMountPath, len(p.Vars)))
}

// noLimitsFile judges a container without /overrideEnv: a warning in env mode when the
// environment carries the scheduler's limits, else a failure.
func (r *podRun) noLimitsFile(name string) Check {
	if r.mode == v1.LimitDeliveryEnv {
		// The kubelet keeps the pod spec's value over the plugin's, so in env mode a spec
		// that sets a limit variable itself is its own limit (docs/attacks.md).
		for i, dv := range r.devs {
			key := libvars.MemoryLimitOf(i)
			if got, err := limitsfile.ParseMemory(r.env[key]); err != nil || got != uint64(dv.UsedMem)<<20 {
				return fail(name, fmt.Sprintf("env mode: the environment has %s=%q, the scheduler assigned %d MiB", key, r.env[key], dv.UsedMem),
					"the pod spec sets the limit variable itself, and in env mode the kubelet keeps the spec's value over the plugin's",
					"remove "+key+" from the container spec, or run the pod in file mode, where the file wins")
			}
		}
		return warn(name, "env mode: no "+limitsfile.ContainerMountPath+"; the limits are in the environment only",
			"login sessions (ssh, su -, sudo, cron) start without the environment and run unlimited", "switch the pod to file mode (see delivery) and recreate it")
	}
	return fail(name, limitsfile.ContainerMountPath+" does not exist in file mode",
		"the plugin that allocated the pod did not write the file (an older plugin, or a pod older than file mode)", "recreate the pod")
}

// fileAgainstDecision holds the parsed file to its format and to the scheduler's decision (memory
// per device, compute of device 0); true with the failure when it does not hold.
func (r *podRun) fileAgainstDecision(name string, p *limitsfile.Parsed) (Check, bool) {
	if len(p.Bad) > 0 {
		var bad []string
		for _, b := range p.Bad {
			bad = append(bad, fmt.Sprintf("line %d: %s", b.Number, b.Reason))
		}
		return fail(name, "malformed limits file: "+strings.Join(bad, "; "),
			"the file was not written by the plugin (hand-edited or damaged); the library skips these lines", "recreate the pod: the plugin writes a new file in Allocate"), true
	}
	if v := p.Vars[limitsfile.FormatKey]; v != limitsfile.FormatVersion {
		return fail(name, fmt.Sprintf("%s=%q, want %s", limitsfile.FormatKey, v, limitsfile.FormatVersion), "not a limits file of this format", "recreate the pod"), true
	}
	for i, dv := range r.devs {
		key := libvars.MemoryLimitOf(i)
		got, err := limitsfile.ParseMemory(p.Vars[key])
		if err != nil || got != uint64(dv.UsedMem)<<20 {
			return fail(name, fmt.Sprintf("%s=%q, the scheduler assigned %d MiB", key, p.Vars[key], dv.UsedMem),
				"the file does not carry the scheduler's limit", "recreate the pod"), true
		}
	}
	if len(r.devs) > 0 {
		if got, want := p.Vars[libvars.SMLimit], strconv.Itoa(int(r.devs[0].UsedCores)); got != want {
			return fail(name, fmt.Sprintf("CUDA_DEVICE_SM_LIMIT=%q, the scheduler assigned %s%% (device 0 speaks for all)", got, want),
				"the file does not carry the scheduler's compute limit", "recreate the pod"), true
		}
	}
	return Check{}, false
}

// envAgainstFile: no variable of the file has another value in the container's environment; true
// with the failure naming each that does.
func (r *podRun) envAgainstFile(name string, p *limitsfile.Parsed) (Check, bool) {
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
			"the container spec overrides the plugin's variables; the file wins in processes of the new library, the environment in old ones", "remove those variables from the container spec"), true
	}
	return Check{}, false
}

// mountReadOnly reads the container's mount table for path.
func mountReadOnly(ctx context.Context, c ctrexec.Container, path string) (ro, found bool) {
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
		path = r.env[libvars.SharedCache]
	}
	if path == "" {
		path = paths.ContainerUsageCache
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
