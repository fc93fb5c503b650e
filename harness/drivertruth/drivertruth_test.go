package drivertruth

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/internal/tier"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/gpu/fakenvml"
)

// TestDriverTruthFakegpu runs `limitbed bench drivertruth` on fakegpu: real cgroups name the two
// containers, the monitor reads fakegpu's NVML and /proc, and the honest processes, the bypass
// (glibc's own dlsym) and the verdict come out as on a GPU; with kill, the bypass alone dies.
func TestDriverTruthFakegpu(t *testing.T) {
	tier.Require(t, tier.Root.For("two cgroups it moves its processes into"))
	lib, _ := fakenvml.Setup(t, "a16-16q")
	p := cbuild.Build(t)
	for _, kill := range []bool{false, true} {
		var out bytes.Buffer
		err := Run(context.Background(), Options{Cudaprobe: filepath.Join(p.Bin, "cudaprobe"), Library: filepath.Join(p.Lib, "libvgpu.so"),
			Env: []string{"LD_LIBRARY_PATH=" + p.Lib}, NVML: gpu.ProcessLister{Lib: lib}, Allowance: 512 << 20, Kill: kill, Out: &out,
			Logger: klog.Background()})
		t.Logf("kill %v:\n%s", kill, out.String())
		if err != nil {
			t.Errorf("kill %v: %v", kill, err)
		}
	}
}
