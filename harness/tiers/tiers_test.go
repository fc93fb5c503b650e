package tiers

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCBuild(t *testing.T) {
	all := []string{"lib/libvgpu.so", "lib/libcuda.so.1", "lib/libnvidia-ml.so.1", "bin/cudaprobe", "bin/gpuinfo"}
	for _, tc := range []struct {
		name    string
		present []string
		ok      bool
		missing string
	}{
		{"nothing built", nil, false, "build/lib/libvgpu.so"},
		{"libraries only", all[:3], false, "build/bin/cudaprobe, build/bin/gpuinfo"},
		{"everything", all, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.present {
				p := filepath.Join(root, "build", f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			r := CBuild(root)
			if r.OK != tc.ok || !strings.Contains(r.Detail, tc.missing) || (!r.OK && r.Fix != "make c") {
				t.Fatalf("CBuild = %+v, want ok=%v naming %q with fix make c", r, tc.ok, tc.missing)
			}
		})
	}
}

// TestKindWithoutCheckout: with no scripts/node-image.sh to name the node image, the kind probe
// fails and says why and what to do, whatever else the machine has.
func TestKindWithoutCheckout(t *testing.T) {
	r := Kind(t.Context(), slog.New(slog.DiscardHandler), t.TempDir())
	if r.OK || r.Detail == "" || r.Fix == "" {
		t.Fatalf("Kind in an empty directory = %+v, want not OK with a reason and a fix", r)
	}
}
