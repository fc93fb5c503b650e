package node

import (
	"context"
	"debug/elf"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/allocate"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/paths"
)

// TestCoreLinkNoAsNeeded: with CoreLink no-as-needed the node preloads the driver double right
// after the core and the container gets it at the path ld.so.preload names; the double needs
// exactly the driver's two libraries (what a core linked with -Wl,--no-as-needed records).
// Without it, ld.so.preload names the core alone. A bad link is refused before anything starts.
func TestCoreLinkNoAsNeeded(t *testing.T) {
	for _, tc := range []struct {
		link    string
		preload string
		mounted bool
	}{
		{"", paths.ContainerLibPath + "\n", false},
		{LinkAsNeeded, paths.ContainerLibPath + "\n", false},
		{LinkNoAsNeeded, paths.ContainerLibPath + "\n" + DriverDoublePath + "\n", true},
	} {
		t.Run("link="+tc.link, func(t *testing.T) {
			cfg := testConfig(t, allocate.ProfileCurrent, v1.LimitDeliveryFile)
			cfg.CoreLink = tc.link
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			n, err := Start(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			got, err := os.ReadFile(filepath.Join(n.HookPath, "vgpu", "ld.so.preload"))
			if err != nil || string(got) != tc.preload {
				t.Fatalf("ld.so.preload = %q (%v), want %q", got, err, tc.preload)
			}
			pod, err := n.Allocate(ctx, PodSpec{Name: "link", GPUMem: 3000})
			if err != nil {
				t.Fatal(err)
			}
			spec := n.ContainerSpec(pod, "link")
			mounted := slices.ContainsFunc(spec.Mounts, func(m sandbox.Mount) bool {
				return m.ContainerPath == DriverDoublePath && m.HostPath == filepath.Join(cfg.Artifacts.Lib, DriverDouble) && m.ReadOnly
			})
			if mounted != tc.mounted {
				t.Errorf("driver double mounted at %s: %v, want %v", DriverDoublePath, mounted, tc.mounted)
			}
		})
	}
	cfg := testConfig(t, allocate.ProfileCurrent, v1.LimitDeliveryFile)
	f, err := elf.Open(filepath.Join(cfg.Artifacts.Lib, DriverDouble))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	needed, err := f.ImportedLibraries()
	if err != nil || !slices.Contains(needed, "libcuda.so.1") || !slices.Contains(needed, "libnvidia-ml.so.1") {
		t.Errorf("%s needs %v (%v), want libcuda.so.1 and libnvidia-ml.so.1", DriverDouble, needed, err)
	}
	cfg.CoreLink = "static"
	if _, err := Start(context.Background(), cfg); err == nil {
		t.Error("core link static: started, want an error")
	}
}
