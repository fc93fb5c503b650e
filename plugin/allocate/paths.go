package allocate

import (
	"github.com/limitbed/limitbed/plugin/paths"
)

// hostPaths are the host paths of one container's allocation, as plugin/paths names them.
type hostPaths struct {
	lib        string // <hook>/vgpu/libvgpu.so
	preload    string // <hook>/vgpu/ld.so.preload
	cacheDir   string // <hook>/vgpu/containers/<podUID>_<ctr>
	limitsFile string // <hook>/vgpu/containers/<podUID>_<ctr>.limits, beside the dir
}

func (a *Allocator) paths(key string) hostPaths {
	dir := paths.ContainersDir(a.opts.HookPath)
	return hostPaths{
		lib:        paths.LibPath(a.opts.HookPath),
		preload:    paths.PreloadPath(a.opts.HookPath),
		cacheDir:   paths.ContainerDir(dir, key),
		limitsFile: paths.LimitsPath(dir, key),
	}
}
