package ccallgraph

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
)

// libraryObjects asks each C library's and C program's Makefile which objects make up each of them
// (`make objects`), so that an object left in the build directory by an older tree is never read:
// the libraries (hamicore, fakegpu) and the test bed's C programs (harness/memjudge/memload).
func libraryObjects(t *testing.T, p cbuild.Paths) map[string][]string {
	t.Helper()
	libs := map[string][]string{}
	for _, dir := range []string{"hamicore", "fakegpu", "harness/memjudge/memload"} {
		args := []string{"-s", "-C", filepath.Join(p.Root, dir), "objects", "OUT=" + p.Out}
		if san := os.Getenv("SAN"); san != "" {
			args = append(args, "SAN="+san)
		}
		out, err := exec.Command("make", args...).Output()
		if err != nil {
			t.Fatalf("make %v: %v", args, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			lib, obj, ok := strings.Cut(sc.Text(), " ")
			if !ok {
				t.Fatalf("make %v: unexpected line %q (want LIBRARY OBJECT)", args, sc.Text())
			}
			libs[lib] = append(libs[lib], obj)
		}
	}
	for want, least := range map[string]int{"libvgpu.so": 5, "libvgpu-hami-v2.10.so": 5, "libcuda.so.1": 5, "libnvidia-ml.so.1": 5, "memload": 2} {
		if len(libs[want]) < least {
			t.Fatalf("make objects lists %d objects for %s: not the library or program", len(libs[want]), want)
		}
	}
	return libs
}

// TestLibrariesHaveNoCallLoops holds every C library and C program to a call graph without loops:
// libvgpu.so (both builds), fakegpu's libcuda.so.1 and libnvidia-ml.so.1, and the memory judge's
// memload, from the objects make just built.
func TestLibrariesHaveNoCallLoops(t *testing.T) {
	p := cbuild.Build(t)
	for lib, objs := range libraryObjects(t, p) {
		t.Run(lib, func(t *testing.T) {
			g, err := Read(objs)
			if err != nil {
				t.Fatalf("%s: %v", lib, err)
			}
			for _, loop := range g.Loops() {
				t.Errorf("%s: files that call each other in a loop (break it: a registration list, or the shared part in a file of its own):\n%s",
					lib, g.Describe(loop))
			}
		})
	}
}

// TestTestHooksOutsideLibrary: the functions only the unit tests call are built into the tests
// (LB_UNIT_TEST, limitsfile_canonical.c), not into libvgpu.so — neither exported nor hidden.
func TestTestHooksOutsideLibrary(t *testing.T) {
	p := cbuild.Build(t)
	testOnly := []string{"lb_region_after_fork", "lb_sched_detach", "lb_file_vars_canonical", "lb_config_canonical"}
	for _, lib := range []string{"libvgpu.so", "libvgpu-hami-v2.10.so"} {
		f, err := elf.Open(filepath.Join(p.Lib, lib))
		if err != nil {
			t.Fatal(err)
		}
		syms, err := f.Symbols()
		f.Close()
		if err != nil {
			t.Fatalf("%s: its symbol table (the test needs an unstripped build): %v", lib, err)
		}
		dyn, err := elf.Open(filepath.Join(p.Lib, lib))
		if err != nil {
			t.Fatal(err)
		}
		dsyms, err := dyn.DynamicSymbols()
		dyn.Close()
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, s := range append(syms, dsyms...) {
			have[s.Name] = true
		}
		if !have["cuMemAlloc_v2"] {
			t.Fatalf("%s: no cuMemAlloc_v2 in its symbols: not read right", lib)
		}
		for _, s := range testOnly {
			if have[s] {
				t.Errorf("%s: contains %s, which only the unit tests call: build it under LB_UNIT_TEST", lib, s)
			}
		}
	}
}
