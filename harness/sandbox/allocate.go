package sandbox

import (
	"maps"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// FromAllocateResponse turns one container's Allocate response into a ContainerSpec the way the
// kubelet hands it to the runtime: Envs become the container's environment, Mounts bind mounts with
// their read-only flags, Devices device nodes. base supplies the rest (name, image, command, and the
// pod spec's own environment, which the response's Envs override as the kubelet does). CDI devices
// and annotations in the response are not mapped: the plugin under test does not use them.
func FromAllocateResponse(base ContainerSpec, resp *pluginapi.ContainerAllocateResponse) ContainerSpec {
	spec := base
	spec.Env = maps.Clone(base.Env)
	if spec.Env == nil {
		spec.Env = map[string]string{}
	}
	spec.Mounts = append([]Mount(nil), base.Mounts...)
	spec.Devices = append([]Device(nil), base.Devices...)
	if resp == nil {
		return spec
	}
	maps.Copy(spec.Env, resp.Envs)
	for _, m := range resp.Mounts {
		spec.Mounts = append(spec.Mounts, Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, ReadOnly: m.ReadOnly})
	}
	for _, d := range resp.Devices {
		spec.Devices = append(spec.Devices, Device{HostPath: d.HostPath, ContainerPath: d.ContainerPath, Permissions: d.Permissions})
	}
	return spec
}
