package allocate

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/limitbed/limitbed/plugin/libvars"
)

// Variables the plugin sets beside the library's (plugin/libvars names those).
const (
	EnvVisibleDevices  = "NVIDIA_VISIBLE_DEVICES"
	EnvDisableControl  = "CUDA_DISABLE_CONTROL"
	EnvFakeGPUProfile  = "FAKEGPU_PROFILE"
	EnvFakeGPUStateDir = "FAKEGPU_STATE_DIR"
)

// hamiEnv returns the limit variables for the container's devices: memory per
// device index, the first device's core limit, the shared cache path and the
// optional switches.
func (a *Allocator) hamiEnv(req Request) map[string]string {
	env := map[string]string{}
	for i, d := range req.Devices {
		env[libvars.MemoryLimitOf(i)] = fmt.Sprintf("%dm", d.UsedMem)
	}
	// Upstream never sets per-device core limits: device 0 speaks for all.
	env[libvars.SMLimit] = strconv.Itoa(int(req.Devices[0].UsedCores))
	env[libvars.SharedCache] = a.sharedCachePath()
	if a.opts.Oversubscribe {
		env[libvars.Oversubscribe] = "true"
	}
	if a.opts.LibCudaLogLevel != "" {
		env[libvars.LogLevel] = a.opts.LibCudaLogLevel
	}
	if a.opts.DisableCoreLimit {
		env[libvars.CorePolicy] = "disable"
	}
	if a.opts.HostPIDBroker && a.opts.Profile != ProfileHAMiV210 {
		env[libvars.HostPIDBroker] = "1"
	}
	return env
}

func (a *Allocator) sharedCachePath() string {
	if a.opts.Profile == ProfileHAMiV210 {
		// HAMi v2.10 named the region after a fresh UUID on every Allocate.
		return ContainerVGPUDir + "/" + a.newUUID() + ".cache"
	}
	return ContainerVGPUDir + "/" + UsageCacheName
}

// visibleDevices returns NVIDIA_VISIBLE_DEVICES: the unique IDs, in order.
func visibleDevices(ids []string) string {
	seen := map[string]bool{}
	var out []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return strings.Join(out, ",")
}

// specEnv returns the literal value of name in the container spec. Values
// from references (valueFrom) are not known to the plugin and are skipped.
// The last definition wins, as it does for the container runtime.
func specEnv(c *corev1.Container, name string) (string, bool) {
	val, ok := "", false
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom == nil {
			val, ok = e.Value, true
		}
	}
	return val, ok
}

// controlDisabled reports CUDA_DISABLE_CONTROL=true in the container spec
// (strconv.ParseBool semantics, as upstream).
func controlDisabled(c *corev1.Container) bool {
	v, ok := specEnv(c, EnvDisableControl)
	if !ok {
		return false
	}
	b, err := strconv.ParseBool(v)
	return err == nil && b
}
