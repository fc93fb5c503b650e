package allocate

import (
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

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
// directory (and, with ".limits", of the limits file). It is the one owner of
// that name: the monitor reads it back with ParseContainerKey. Both parts come
// from the API server and reach a host path, a file name and metric labels,
// so both are held to what a real API server accepts: a UID of letters,
// digits and '-' (at most 128), a container name that is a DNS-1123 label.
// That rules out '/', '\', NUL, '.' and '..', '_' in the UID (the name is
// split at the first '_'), newlines, spaces and bytes that are not UTF-8.
func ContainerKey(podUID, container string) (string, error) {
	if err := checkUID(podUID); err != nil {
		return "", err
	}
	if msgs := validation.IsDNS1123Label(container); len(msgs) > 0 {
		return "", fmt.Errorf("container name %q is not a DNS-1123 label: %s", container, strings.Join(msgs, "; "))
	}
	return podUID + "_" + container, nil
}

// ParseContainerKey splits a name ContainerKey made; a name it could not
// have made is an error.
func ParseContainerKey(key string) (podUID, container string, err error) {
	uid, ctr, ok := strings.Cut(key, "_")
	if !ok {
		return "", "", fmt.Errorf("%q is not <podUID>_<container>", key)
	}
	if _, err := ContainerKey(uid, ctr); err != nil {
		return "", "", err
	}
	return uid, ctr, nil
}

// maxUIDLength bounds a pod UID (Kubernetes writes 36-character UUIDs).
const maxUIDLength = 128

func checkUID(uid string) error {
	if uid == "" {
		return fmt.Errorf("pod UID is empty")
	}
	if len(uid) > maxUIDLength {
		return fmt.Errorf("pod UID is %d bytes long (at most %d)", len(uid), maxUIDLength)
	}
	for _, c := range []byte(uid) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("pod UID %q has %q: only letters, digits and '-'", uid, c)
		}
	}
	return nil
}
