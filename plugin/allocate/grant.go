package allocate

import (
	"fmt"
	"os"
	"path/filepath"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/annotations"
	"github.com/limitbed/limitbed/plugin/schedproto"
)

// grantMount publishes the container's grant file, naming its GPUs in its device order with every
// entry Wait (the library waits for vgpu-scheduler's first word, at most 0.5 s), and mounts it
// read-only at schedproto.ContainerGrantPath (the grant file's paths are schedproto's). A failure fails the allocation: with the scheduler deployed, a
// container without its grant file would pace itself beside scheduled neighbours.
func (a *Allocator) grantMount(resp *pluginapi.ContainerAllocateResponse, key string, devs annotations.ContainerDevices) error {
	spec := schedproto.GrantSpec{}
	for _, d := range devs {
		u, err := schedproto.ParseUUID(d.UUID)
		if err != nil {
			return fmt.Errorf("compute scheduler grant file: %w (the scheduler needs NVIDIA GPU UUIDs; run the device plugin with --compute-scheduler=false where devices are named otherwise)", err)
		}
		spec.GPUs = append(spec.GPUs, u)
	}
	data, err := spec.Bytes()
	if err != nil {
		return err
	}
	path := schedproto.GrantPath(schedproto.GrantDir(a.opts.HookPath), key)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create grant dir %s: %w", filepath.Dir(path), err)
	}
	if err := a.publisher.Publish(path, data); err != nil {
		return err
	}
	resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: schedproto.ContainerGrantPath, HostPath: path, ReadOnly: true})
	return nil
}
