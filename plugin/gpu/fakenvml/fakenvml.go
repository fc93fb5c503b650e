// Package fakenvml points tests at fakegpu's real libnvidia-ml.so.1: it
// builds the C artefacts, selects a profile from fakegpu/profiles through the
// process environment and returns a go-nvml binding of the library.
package fakenvml

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/internal/tier"
)

// Setup builds fakegpu, selects profile (a name in fakegpu/profiles) with a
// fresh state directory, applies env ("NAME=value" pairs, e.g.
// "FAKEGPU_LOST_DEVICE=1") and returns fakegpu's NVML and the library's
// path. fakegpu reads its environment when NVML's reference count goes from
// 0 to 1, so every Init after Setup sees this profile. The variables are
// set with t.Setenv: a caller must not be parallel.
func Setup(t testing.TB, profile string, env ...string) (nvml.Interface, string) {
	t.Helper()
	// go-nvml dlopens the library into the Go process, where a sanitizer
	// build cannot run. The sanitizer build is exercised by fakegpu's and
	// hamicore's own tests.
	tier.Require(t, tier.Unsanitized)
	p := cbuild.Build(t)
	t.Setenv("FAKEGPU_PROFILE", profile)
	t.Setenv("FAKEGPU_PROFILE_DIR", filepath.Join(p.Root, "fakegpu", "profiles"))
	t.Setenv("FAKEGPU_STATE_DIR", t.TempDir())
	t.Setenv("FAKEGPU_LOST_DEVICE", "")
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			t.Fatalf("fakenvml: %q is not NAME=value", kv)
		}
		t.Setenv(k, v)
	}
	lib := filepath.Join(p.Lib, "libnvidia-ml.so.1")
	return nvml.New(nvml.WithLibraryPath(lib)), lib
}
