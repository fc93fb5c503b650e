package cbuild

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// Program compiles a test's small C driver (its sources: the driver and the project files it
// links, paths relative to the test's directory or absolute) with the project's warnings as
// errors, with the include directories given relative to the repository root, and returns the
// binary's path. Tests use it to hold a Go owner of a format to the C code that owns it too.
func Program(tb testing.TB, includes []string, sources ...string) string {
	tb.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		tb.Fatalf("a C compiler (cc) is required: %v", err)
	}
	bin := filepath.Join(tb.TempDir(), "driver")
	args := []string{"-std=c11", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE", "-o", bin}
	for _, inc := range includes {
		args = append(args, "-I", filepath.Join(RepoRoot(), inc))
	}
	out, err := exec.Command(cc, append(args, sources...)...).CombinedOutput()
	if err != nil {
		tb.Fatalf("compile %v: %v\n%s", sources, err, out)
	}
	return bin
}
