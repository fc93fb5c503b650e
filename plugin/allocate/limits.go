package allocate

import (
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/libvars"
	"github.com/limitbed/limitbed/plugin/limitsfile"
)

// fileKeys are the plugin-set variables HAMi-core reads; the file carries
// them so a process without the environment (SSH, su -, cron) gets them.
// NVIDIA_VISIBLE_DEVICES is read by the container toolkit, not HAMi-core.
var fileKeys = []string{libvars.SMLimit, libvars.SharedCache, libvars.Oversubscribe, libvars.CorePolicy, libvars.LogLevel, libvars.HostPIDBroker}

// specKeys are taken from the container spec, where the webhook put them.
// The spec value wins over a plugin value: the runtime lets a spec variable
// override a device-plugin one, so this is what the entrypoint sees.
var specKeys = []string{libvars.TaskPriority, libvars.CorePolicy}

// fileDefaults are written when neither the plugin nor the spec sets the
// key: the library's own defaults, spelled out. In file mode libvgpu.so takes
// nothing the file governs from the process environment, and an old library
// (which setenv()s the file's lines) gets these over whatever a process set,
// so a key left out can never be filled in looser by the environment.
// LIBCUDA_LOG_LEVEL is the one key a process may still set itself (it only
// changes what that process is told), so it is written only when configured.
var fileDefaults = map[string]string{
	libvars.Oversubscribe: "false",
	libvars.CorePolicy:    "default",
	libvars.TaskPriority:  "1",
	libvars.HostPIDBroker: "0",
}

// limitsVars selects the file's variables from the container's environment.
func limitsVars(env map[string]string, c *corev1.Container) map[string]string {
	vars := maps.Clone(fileDefaults)
	for k, v := range env {
		if strings.HasPrefix(k, libvars.MemoryLimit+"_") {
			vars[k] = v
		}
	}
	for _, k := range fileKeys {
		if v, ok := env[k]; ok {
			vars[k] = v
		}
	}
	for _, k := range specKeys {
		if v, ok := specEnv(c, k); ok && v != "" {
			vars[k] = v
		}
	}
	return vars
}

// deliverLimits delivers the limits by file, or not, as the profile and the
// resolved delivery say.
func (a *Allocator) deliverLimits(resp *pluginapi.ContainerAllocateResponse, p hostPaths, req Request, env map[string]string) error {
	switch {
	case a.opts.Profile == ProfileHAMiV210:
		// v2.10 knows no file; leave whatever is on disk alone, as it would.
		return nil
	case req.Delivery == v1.LimitDeliveryEnv:
		// A file from an earlier file-mode allocation would be stale.
		return a.publisher.RemoveFile(p.limitsFile)
	default:
		return a.limitsFile(resp, p, req.Container, env)
	}
}

// limitsFile renders and atomically publishes the limits file beside the
// cache dir and mounts it read-only at /overrideEnv. Called last, once the
// environment is final; any failure fails the allocation, because a limit
// that could not be delivered must not become no limit.
func (a *Allocator) limitsFile(resp *pluginapi.ContainerAllocateResponse, p hostPaths, c *corev1.Container, env map[string]string) error {
	data, err := limitsfile.Render(limitsVars(env, c))
	if err != nil {
		return fmt.Errorf("limits file %s: %w", p.limitsFile, err)
	}
	if err := a.publisher.Publish(p.limitsFile, data); err != nil {
		return err
	}
	resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: limitsfile.ContainerMountPath, HostPath: p.limitsFile, ReadOnly: true})
	return nil
}
