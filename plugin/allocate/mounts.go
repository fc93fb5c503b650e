package allocate

import (
	"fmt"
	"os"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/internal/safefile"
	"github.com/limitbed/limitbed/plugin/paths"
)

// libraryMounts adds libvgpu.so and, unless the container disabled control,
// /etc/ld.so.preload (the preload is what loads the library into every
// process, login sessions included).
func (a *Allocator) libraryMounts(resp *pluginapi.ContainerAllocateResponse, p hostPaths, disabled bool) {
	resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: paths.ContainerLibPath, HostPath: p.lib, ReadOnly: true})
	if !disabled {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: paths.ContainerPreloadPath, HostPath: p.preload, ReadOnly: true})
	}
}

// cacheDirMount recreates the per-container directory (a stale usage.cache
// from an earlier allocation must not carry over) and mounts it read-write
// at /usr/local/vgpu. Runtimes apply mounts parent first, so the read-only
// libvgpu.so file mount lands on top of it, as upstream relies on. An earlier
// allocation's directory is the container's to have shaped: it is removed
// without following links, with bounded descriptors at any depth.
func (a *Allocator) cacheDirMount(resp *pluginapi.ContainerAllocateResponse, p hostPaths) error {
	if err := safefile.RemoveTree(p.cacheDir); err != nil {
		return fmt.Errorf("remove cache dir %s: %w", p.cacheDir, err)
	}
	if err := os.MkdirAll(p.cacheDir, 0o777); err != nil {
		return fmt.Errorf("create cache dir %s: %w", p.cacheDir, err)
	}
	// Any user in the container creates usage.cache; MkdirAll is subject to
	// the umask.
	if err := os.Chmod(p.cacheDir, 0o777); err != nil {
		return fmt.Errorf("chmod cache dir %s: %w", p.cacheDir, err)
	}
	resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: paths.ContainerVGPUDir, HostPath: p.cacheDir, ReadOnly: false})
	return nil
}

// lockDirMount shares the host lock directory across containers, only for
// the hami-v2.10 profile: HAMi v2.10 mounts /tmp/vgpulock read-write into
// every container, shared by all pods on the node. The current libvgpu.so
// never opens it, so for it the mount would only be a read-write path
// every tenant on the node shares.
func (a *Allocator) lockDirMount(resp *pluginapi.ContainerAllocateResponse) error {
	dir := a.opts.LockDir
	if dir == "" || a.opts.Profile != ProfileHAMiV210 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("create lock dir %s: %w", dir, err)
	}
	resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: paths.ContainerLockDir, HostPath: dir, ReadOnly: false})
	return nil
}
