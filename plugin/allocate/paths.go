package allocate

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/limitbed/limitbed/plugin/limitsfile"
)

// Container-side paths. They are fixed rather than derived from HOOK_PATH
// (upstream derives both sides from it; the two coincide at the default
// /usr/local): libvgpu.so dlopens itself from /usr/local/vgpu/libvgpu.so by
// default and the ld.so.preload file names that path, so the container side
// cannot move with the host's install location.
const (
	ContainerVGPUDir     = "/usr/local/vgpu"
	ContainerLibPath     = ContainerVGPUDir + "/libvgpu.so"
	ContainerPreloadPath = "/etc/ld.so.preload"
	ContainerLockDir     = "/tmp/vgpulock"
	// UsageCacheName is the shared region file in the per-container dir. A
	// fixed name (upstream used a random UUID) lets the file name it ahead.
	UsageCacheName = "usage.cache"
)

// Host-side names below <HookPath>/vgpu.
const (
	hostLibName     = "libvgpu.so"
	hostPreloadName = "ld.so.preload"
	containersDir   = "containers"
)

// hostPaths are the host paths of one container's allocation.
type hostPaths struct {
	lib        string // <hook>/vgpu/libvgpu.so
	preload    string // <hook>/vgpu/ld.so.preload
	cacheDir   string // <hook>/vgpu/containers/<podUID>_<ctr>
	limitsFile string // <hook>/vgpu/containers/<podUID>_<ctr>.limits, beside the dir
}

// ContainersDir returns <hookPath>/vgpu/containers, the directory the
// monitor sweeps.
func ContainersDir(hookPath string) string {
	return filepath.Join(hookPath, "vgpu", containersDir)
}

func (a *Allocator) paths(key string) hostPaths {
	vgpu := filepath.Join(a.opts.HookPath, "vgpu")
	dir := ContainersDir(a.opts.HookPath)
	return hostPaths{
		lib:        filepath.Join(vgpu, hostLibName),
		preload:    filepath.Join(vgpu, hostPreloadName),
		cacheDir:   filepath.Join(dir, key),
		limitsFile: filepath.Join(dir, key+limitsfile.Suffix),
	}
}

// ContainerKey returns "<podUID>_<container>", the name of the per-container
// directory, after checking that neither part can escape the containers
// directory or be mistaken for another entry: no empty parts, no "/" or
// "\", no NUL, no leading "." (which also rules out "." and ".."), and no
// "_" in the pod UID (the monitor splits the name at the first "_").
func ContainerKey(podUID, container string) (string, error) {
	if err := checkNamePart("pod UID", podUID); err != nil {
		return "", err
	}
	if strings.Contains(podUID, "_") {
		return "", fmt.Errorf("pod UID %q contains '_'", podUID)
	}
	if err := checkNamePart("container name", container); err != nil {
		return "", err
	}
	return podUID + "_" + container, nil
}

func checkNamePart(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case strings.ContainsAny(s, "/\\\x00"):
		return fmt.Errorf("%s %q contains '/', '\\' or NUL", what, s)
	case strings.HasPrefix(s, "."):
		return fmt.Errorf("%s %q starts with '.'", what, s)
	case len(s) > 200:
		return fmt.Errorf("%s is %d bytes long", what, len(s))
	}
	return nil
}
