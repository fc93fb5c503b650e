package identity

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/limitbed/limitbed/plugin/annotations"
	"github.com/limitbed/limitbed/plugin/internal/safefile"
	"github.com/limitbed/limitbed/plugin/libvars"
	"github.com/limitbed/limitbed/plugin/limitsfile"
)

// maxLimitsFile bounds a limits file read (the plugin writes a few hundred
// bytes; libvgpu.so reads at most 4 MiB).
const maxLimitsFile = 4 << 20

// ReadLimits reads a limits file as libvgpu.so resolves it (file mode).
// The file is the plugin's, root-owned, beside the container's cache
// directory; it is still opened through safefile (no link followed, a
// regular file only, bounded, non-blocking). A missing file is an error with
// safefile.ReasonMissing.
func ReadLimits(path string) (Limits, error) {
	data, err := safefile.ReadFile(path, safefile.Size{Min: 0, Max: maxLimitsFile})
	if err != nil {
		return Limits{}, fmt.Errorf("limits file: %w", err)
	}
	return fromResolved(SourceFile, limitsfile.Resolve(limitsfile.Parse(data)), limitsfile.MaxDevices), nil
}

// placedLimits are an env-mode container's limits: what the plugin put in
// its environment from the scheduler's placement (memory per device, the
// first device's compute limit) and its spec's policy and priority, resolved
// with the library's rules.
func placedLimits(devs annotations.ContainerDevices, ctr *corev1.Container) Limits {
	vars := map[string]string{}
	for i, d := range devs {
		vars[libvars.MemoryLimitOf(i)] = strconv.Itoa(int(max(d.UsedMem, 0))) + "m"
	}
	if len(devs) > 0 {
		vars[libvars.SMLimit] = strconv.Itoa(int(max(devs[0].UsedCores, 0)))
	}
	for _, k := range []string{libvars.CorePolicy, libvars.TaskPriority} {
		if v, ok := specValue(ctr, k); ok {
			vars[k] = v
		}
	}
	return fromResolved(SourceAnnotation, limitsfile.Resolve(&limitsfile.Parsed{Vars: vars}), len(devs))
}

func fromResolved(src Source, r limitsfile.Resolved, n int) Limits {
	n = min(max(n, 1), limitsfile.MaxDevices)
	return Limits{Source: src, Memory: append([]uint64(nil), r.Memory[:n]...), SM: r.SM[0], Policy: r.Policy, Priority: r.Priority}
}

// specValue is the value of name in the container spec: its last definition,
// as for the runtime. One taken from elsewhere (valueFrom) is not known to
// the node: no value, and the library's default applies in the verdict.
func specValue(c *corev1.Container, name string) (string, bool) {
	for i := len(c.Env) - 1; i >= 0; i-- {
		if e := c.Env[i]; e.Name == name {
			return e.Value, e.ValueFrom == nil
		}
	}
	return "", false
}
