package allocate

import (
	"fmt"
	"os"
	"path/filepath"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/internal/safefile"
)

// libraryMounts adds libvgpu.so and, unless the container disabled control,
// /etc/ld.so.preload (the preload is what loads the library into every
// process, login sessions included).
func (a *Allocator) libraryMounts(resp *pluginapi.ContainerAllocateResponse, p hostPaths, disabled bool) {
	resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: ContainerLibPath, HostPath: p.lib, ReadOnly: true})
	if !disabled {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: ContainerPreloadPath, HostPath: p.preload, ReadOnly: true})
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
	resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: ContainerVGPUDir, HostPath: p.cacheDir, ReadOnly: false})
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
	resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: ContainerLockDir, HostPath: dir, ReadOnly: false})
	return nil
}

// Fake-driver container paths: the libraries go where a container toolkit
// puts the real driver's, so the default loader path finds them; the profile
// and the state directory go to fakegpu's own defaults (fakegpu/src/config.h
// FG_DEFAULT_PROFILE, and /run/fakegpu in fakegpu/src/config.c), so a process
// that lost the environment (ssh, su -, cron) still sees the same GPUs.
const (
	ContainerFakeLibDir   = "/usr/lib/x86_64-linux-gnu"
	ContainerFakeProfile  = "/etc/fakegpu/profile"
	ContainerFakeStateDir = "/run/fakegpu"
)

// FakeDriverLibs are the fakegpu libraries mounted in fake-driver mode.
var FakeDriverLibs = []string{"libcuda.so.1", "libnvidia-ml.so.1"}

// fakeDriverMounts injects fakegpu the way the NVIDIA container toolkit
// injects a real driver: its libraries, its profile (read-only) and the
// shared device state (read-write: all processes on a "host" share a GPU).
// Both land on fakegpu's default paths; FAKEGPU_PROFILE and
// FAKEGPU_STATE_DIR are set too, to the same paths, so the environment can
// only agree with the defaults and never decides which GPU a process sees.
func (a *Allocator) fakeDriverMounts(resp *pluginapi.ContainerAllocateResponse) {
	fd := a.opts.FakeDriver
	if fd == nil {
		return
	}
	for _, lib := range FakeDriverLibs {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{
			ContainerPath: ContainerFakeLibDir + "/" + lib, HostPath: filepath.Join(fd.LibDir, lib), ReadOnly: true})
	}
	if fd.ProfilePath != "" {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: ContainerFakeProfile, HostPath: fd.ProfilePath, ReadOnly: true})
		resp.Envs[EnvFakeGPUProfile] = ContainerFakeProfile
	}
	if fd.StateDir != "" {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: ContainerFakeStateDir, HostPath: fd.StateDir, ReadOnly: false})
		resp.Envs[EnvFakeGPUStateDir] = ContainerFakeStateDir
	}
}
