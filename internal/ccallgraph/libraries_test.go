package ccallgraph

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
)

// TestLibrariesHaveNoCallLoops holds both C libraries to a call graph without loops: libvgpu.so
// (hamicore, both its builds) and fakegpu's libcuda.so.1 and libnvidia-ml.so.1 (their objects
// together; they share the common ones). The objects are those make just built.
func TestLibrariesHaveNoCallLoops(t *testing.T) {
	p := cbuild.Build(t)
	for _, lib := range []struct{ name, dir string }{
		{"libvgpu.so", "hamicore"},
		{"libvgpu-hami-v2.10.so", "hamicore-legacy"},
		{"fakegpu", filepath.Join("fakegpu", fakegpuVariant())},
	} {
		t.Run(lib.name, func(t *testing.T) {
			objs, err := filepath.Glob(filepath.Join(p.Out, "obj", lib.dir, "*.o"))
			if err != nil {
				t.Fatal(err)
			}
			g, err := Read(objs)
			if err != nil {
				t.Fatalf("%s: %v", lib.name, err)
			}
			if len(g.Files) < 10 {
				t.Fatalf("%s: only %d object files under %s: not the library", lib.name, len(g.Files), lib.dir)
			}
			for _, loop := range g.Loops() {
				t.Errorf("%s: files that call each other in a loop (break it: a registration list, or the shared part in a file of its own):\n%s",
					lib.name, g.Describe(loop))
			}
		})
	}
}

// fakegpuVariant is the object directory fakegpu's Makefile uses for the build cbuild made.
func fakegpuVariant() string {
	if san := os.Getenv("SAN"); san != "" {
		return "san-" + strings.ReplaceAll(san, ",", "-")
	}
	return "plain"
}
