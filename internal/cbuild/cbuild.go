// Package cbuild gives Go tests the project's C artefacts (fakegpu's driver libraries and tools,
// libvgpu.so), building them first with the repository's Makefiles.
//
// Tests run the real binaries rather than stand-ins, so they must never pass against a stale
// or missing build: Build runs make every time (make itself makes it cheap when nothing changed)
// and serialises concurrent test processes with a lock file, since `go test ./...` runs packages
// in parallel.
package cbuild

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
)

// Paths locates the built artefacts.
type Paths struct {
	Root string // repository root
	Out  string // build output directory
	Lib  string // Out/lib: libcuda.so.1, libnvidia-ml.so.1, libvgpu.so
	Bin  string // Out/bin: cudaprobe, gpuinfo and test programs
}

var (
	once   sync.Once
	built  Paths
	errOut error
)

// RepoRoot returns the repository root, found from this source file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Build builds the C artefacts once per test process and returns where they are.
// LIMITBED_BUILD_DIR selects another output directory (the sanitizer build uses one); the
// directory must be built with the same variables make was given for it (SAN=...).
func Build(tb testing.TB) Paths {
	tb.Helper()
	once.Do(func() { built, errOut = build() })
	if errOut != nil {
		tb.Fatalf("building C artefacts: %v", errOut)
	}
	return built
}

func build() (Paths, error) {
	root := RepoRoot()
	out := os.Getenv("LIMITBED_BUILD_DIR")
	if out == "" {
		out = filepath.Join(root, "build")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return Paths{}, fmt.Errorf("create build dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(out, ".build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return Paths{}, fmt.Errorf("open build lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return Paths{}, fmt.Errorf("lock build dir: %w", err)
	}
	args := []string{"-s", "-C", root, "c", "OUT=" + out}
	if san := os.Getenv("SAN"); san != "" {
		args = append(args, "SAN="+san)
	}
	cmd := exec.Command("make", args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return Paths{}, fmt.Errorf("make %v: %w\n%s", args, err, buf.String())
	}
	return Paths{Root: root, Out: out, Lib: filepath.Join(out, "lib"), Bin: filepath.Join(out, "bin")}, nil
}
