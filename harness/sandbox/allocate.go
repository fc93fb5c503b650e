package sandbox

import (
	"maps"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// FromAllocateResponse turns one container's Allocate response into a ContainerSpec the way the
// kubelet hands it to the runtime: Envs become the container's environment, Mounts bind mounts with
// their read-only flags, Devices device nodes. base supplies the rest (name, image, command, and the
// pod spec's own environment). CDI devices and annotations in the response are not mapped: the
// plugin under test does not use them.
//
// Environment precedence — the one place every backend takes it from: the kubelet puts the device
// plugins' Envs first and the pod spec's `env` after them in the list it hands the runtime, and the
// runtime keeps the last value of a name, so a variable the pod spec sets wins over the plugin's.
// (A pod that sets CUDA_DEVICE_MEMORY_LIMIT_0 itself therefore overrides its limit in env mode;
// in file mode libvgpu.so takes the limits from /overrideEnv instead.)
func FromAllocateResponse(base ContainerSpec, resp *pluginapi.ContainerAllocateResponse) ContainerSpec {
	spec := base
	spec.Env = map[string]string{}
	if resp != nil {
		maps.Copy(spec.Env, resp.Envs)
	}
	maps.Copy(spec.Env, base.Env)
	spec.Mounts = append([]Mount(nil), base.Mounts...)
	spec.Devices = append([]Device(nil), base.Devices...)
	if resp == nil {
		return spec
	}
	for _, m := range resp.Mounts {
		spec.Mounts = append(spec.Mounts, Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, ReadOnly: m.ReadOnly})
	}
	for _, d := range resp.Devices {
		spec.Devices = append(spec.Devices, Device{HostPath: d.HostPath, ContainerPath: d.ContainerPath, Permissions: d.Permissions})
	}
	return spec
}
