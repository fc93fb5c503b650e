package schedproto

import (
	"path/filepath"

	"github.com/limitbed/limitbed/plugin/paths"
)

// Where the two files live on the node. The device plugin creates a container's grant file in the
// grant directory, root's and outside every container's read-write directory, and mounts it
// read-only at ContainerGrantPath; the library writes the report in the container's directory
// (mounted read-write at paths.ContainerVGPUDir), where the scheduler finds it beside the
// container's other files.
const (
	// GrantDirName is the grant directory's name below <HOOK_PATH>/vgpu.
	GrantDirName = "sched"
	// GrantSuffix names a container's grant file in the grant directory: <key>.grant.
	GrantSuffix = ".grant"
)

// GrantDir returns <hookPath>/vgpu/sched, the directory of the grant files.
func GrantDir(hookPath string) string { return filepath.Join(paths.VGPUDir(hookPath), GrantDirName) }

// GrantPath returns a container's grant file in the grant directory dir.
func GrantPath(dir, key string) string { return filepath.Join(dir, key+GrantSuffix) }

// ReportPath returns a container's report in the containers directory dir (paths.ContainersDir).
func ReportPath(dir, key string) string {
	return filepath.Join(paths.ContainerDir(dir, key), ReportName)
}
