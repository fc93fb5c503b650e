package node

import (
	"path"
	"path/filepath"
	"strings"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/allocate"
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
	return sandbox.FromAllocateResponse(base, p.Resp)
}

// CacheFile returns the pod's shared region as the container sees it (the response's
// CUDA_DEVICE_MEMORY_SHARED_CACHE) and on the host; "" when the response sets none (MIG).
func (p *Pod) CacheFile() (container, host string) {
	c := p.Resp.GetEnvs()[allocate.EnvSharedCache]
	if c == "" {
		return "", ""
	}
	rel, ok := strings.CutPrefix(c, allocate.ContainerVGPUDir+"/")
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
