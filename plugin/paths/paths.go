// Package paths is the one owner of where the device plugin's files live: on the node below
// <HOOK_PATH>/vgpu (the library, the preload file, one directory and one limits file per
// container), in every container (/usr/local/vgpu, /etc/ld.so.preload), and the name that ties a
// container to its files (ContainerKey). The plugin writes them (plugin/allocate), the monitor and
// the scheduler read them, the doctor checks them and the test bed lays them out, all through
// these names. It links no kubelet API, so the node agents that only read the files do not either.
//
// The compute scheduler's grant and report files are plugin/schedproto's; the limits file's format
// and its container path are plugin/limitsfile's.
package paths

import (
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/limitbed/limitbed/plugin/limitsfile"
)

// Container-side paths. They are fixed rather than derived from HOOK_PATH (upstream derives both
// sides from it; the two coincide at the default /usr/local): libvgpu.so dlopens itself from
// /usr/local/vgpu/libvgpu.so by default and the ld.so.preload file names that path, so the
// container side cannot move with the host's install location.
const (
	ContainerVGPUDir     = "/usr/local/vgpu"
	ContainerLibPath     = ContainerVGPUDir + "/" + LibName
	ContainerPreloadPath = "/etc/ld.so.preload"
	ContainerLockDir     = "/tmp/vgpulock"
	// UsageCacheName is the shared region file in the per-container dir. A fixed name (upstream
	// used a random UUID) lets the file name it ahead.
	UsageCacheName = "usage.cache"
	// ContainerUsageCache is where a container's processes find that region.
	ContainerUsageCache = ContainerVGPUDir + "/" + UsageCacheName
)

// Host-side names below <HookPath>/vgpu.
const (
	LibName       = "libvgpu.so"
	PreloadName   = "ld.so.preload"
	containersDir = "containers"
)

// VGPUDir returns <hookPath>/vgpu, the root of everything the plugin installs and writes.
func VGPUDir(hookPath string) string { return filepath.Join(hookPath, "vgpu") }

// LibPath returns the host path of the installed libvgpu.so.
func LibPath(hookPath string) string { return filepath.Join(VGPUDir(hookPath), LibName) }

// PreloadPath returns the host path of the installed ld.so.preload file.
func PreloadPath(hookPath string) string { return filepath.Join(VGPUDir(hookPath), PreloadName) }

// ContainersDir returns <hookPath>/vgpu/containers, the directory the monitor sweeps.
func ContainersDir(hookPath string) string { return filepath.Join(VGPUDir(hookPath), containersDir) }

// ContainerDir returns a container's directory in the containers directory dir (mounted
// read-write at ContainerVGPUDir).
func ContainerDir(dir, key string) string { return filepath.Join(dir, key) }

// LimitsPath returns a container's limits file in the containers directory dir, beside its
// directory: <dir>/<key>.limits.
func LimitsPath(dir, key string) string { return filepath.Join(dir, key+limitsfile.Suffix) }

// ContainerKey returns "<podUID>_<container>", the name of the per-container directory (and, with
// ".limits", of the limits file). It is the one owner of that name: the monitor reads it back
// with ParseContainerKey. Both parts come from the API server and reach a host path, a file name
// and metric labels, so both are held to what a real API server accepts: a UID of letters, digits
// and '-' (at most 128), a container name that is a DNS-1123 label. That rules out '/', '\', NUL,
// '.' and '..', '_' in the UID (the name is split at the first '_'), newlines, spaces and bytes
// that are not UTF-8.
func ContainerKey(podUID, container string) (string, error) {
	if err := checkUID(podUID); err != nil {
		return "", err
	}
	if msgs := validation.IsDNS1123Label(container); len(msgs) > 0 {
		return "", fmt.Errorf("container name %q is not a DNS-1123 label: %s", container, strings.Join(msgs, "; "))
	}
	return podUID + "_" + container, nil
}

// ParseContainerKey splits a name ContainerKey made; a name it could not have made is an error.
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
