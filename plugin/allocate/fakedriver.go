package allocate

import (
	"fmt"
	"os"
	"path/filepath"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// The test bed's fake driver (fakegpu) in containers: everything the plugin
// knows of fakegpu is in this file, and none of it is used unless the node
// runs with --fake-driver.

// FakeDriver locates fakegpu on the host for the test bed.
type FakeDriver struct {
	LibDir      string // holds libcuda.so.1 and libnvidia-ml.so.1
	ProfilePath string // fakegpu profile; "" = none
	StateDir    string // shared device state; "" = none
}

// fakegpu's variables, set to the paths it is mounted at.
const (
	EnvFakeGPUProfile  = "FAKEGPU_PROFILE"
	EnvFakeGPUStateDir = "FAKEGPU_STATE_DIR"
)

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

// ShareFakeState makes the fake driver's shared state directory writable by every user with the
// sticky bit (as /tmp), as fakegpu makes the directories it creates: the chart's hostPath creates
// it 0755, and then a non-root login session's GPU process (ssh, su -) fell back to a private
// state in /tmp, a GPU of its own instead of the pods' one.
func ShareFakeState(dir string) error {
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		return fmt.Errorf("fake driver state %s: %w", dir, err)
	}
	return nil
}
