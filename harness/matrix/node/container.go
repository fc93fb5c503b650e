package node

import (
	"path"
	"path/filepath"
	"strings"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/allocate"
	"github.com/limitbed/limitbed/plugin/libvars"
	"github.com/limitbed/limitbed/plugin/paths"
)

// ToolDir is where the harness bind-mounts fakegpu's and hamicore's tools in every container.
// Processes started by cron have PATH=/usr/bin:/bin: scenarios call the tools by absolute path or
// put ToolDir on PATH themselves.
const ToolDir = "/usr/local/bin"

// Tools are the workload tools mounted into every container.
var Tools = []string{"cudaprobe", "gpuinfo", "regiondump"}

// ContainerSpec turns pod's Allocate response into the container the runtime would start, plus the
// harness's tools (read-only, in ToolDir). name must be unique on the backend.
func (n *Node) ContainerSpec(p *Pod, name string) sandbox.ContainerSpec {
	base := sandbox.ContainerSpec{Name: name, Image: sandbox.WorkloadImage, Env: map[string]string{}}
	for k, v := range p.SpecEnv {
		base.Env[k] = v
	}
	for _, t := range Tools {
		base.Mounts = append(base.Mounts, sandbox.Mount{
			HostPath: filepath.Join(n.cfg.Artifacts.Bin, t), ContainerPath: path.Join(ToolDir, t), ReadOnly: true})
	}
	if !p.HasMount(path.Join(allocate.ContainerFakeLibDir, allocate.FakeDriverLibs[0])) {
		n.addDriver(&base)
	}
	if n.cfg.CoreLink == LinkNoAsNeeded {
		base.Mounts = append(base.Mounts, sandbox.Mount{
			HostPath: filepath.Join(n.cfg.Artifacts.Lib, DriverDouble), ContainerPath: DriverDoublePath, ReadOnly: true})
	}
	return sandbox.FromAllocateResponse(base, p.Resp)
}

// addDriver mounts fakegpu as the driver, as the NVIDIA container toolkit mounts the driver's
// libraries into a container that was given GPUs: for a plugin that does not do it itself
// (limitbed's plugin does in fake-driver mode; HAMi's leaves it to the runtime).
func (n *Node) addDriver(spec *sandbox.ContainerSpec) {
	for _, lib := range allocate.FakeDriverLibs {
		spec.Mounts = append(spec.Mounts, sandbox.Mount{HostPath: filepath.Join(n.cfg.Artifacts.Lib, lib),
			ContainerPath: path.Join(allocate.ContainerFakeLibDir, lib), ReadOnly: true})
	}
	spec.Mounts = append(spec.Mounts,
		sandbox.Mount{HostPath: n.cfg.GPUProfile, ContainerPath: allocate.ContainerFakeProfile, ReadOnly: true},
		sandbox.Mount{HostPath: n.StateDir, ContainerPath: allocate.ContainerFakeStateDir})
	spec.Env[allocate.EnvFakeGPUProfile] = allocate.ContainerFakeProfile
	spec.Env[allocate.EnvFakeGPUStateDir] = allocate.ContainerFakeStateDir
}

// CacheFile returns the pod's shared region as the container sees it (the response's
// CUDA_DEVICE_MEMORY_SHARED_CACHE) and on the host; "" when the response sets none (MIG).
func (p *Pod) CacheFile() (container, host string) {
	c := p.Resp.GetEnvs()[libvars.SharedCache]
	if c == "" {
		return "", ""
	}
	rel, ok := strings.CutPrefix(c, paths.ContainerVGPUDir+"/")
	if !ok {
		return c, ""
	}
	return c, filepath.Join(p.CacheDir, rel)
}

// HasMount reports whether the response mounts something at containerPath.
func (p *Pod) HasMount(containerPath string) bool {
	for _, m := range p.Resp.GetMounts() {
		if m.ContainerPath == containerPath {
			return true
		}
	}
	return false
}
