package libvars

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
)

// cNames builds testdata/names.c against hamicore's variable table and runs it with args: the
// names the library holds by id, and the id it looks each arg up as (-1: not a variable).
func cNames(t *testing.T, args ...string) (names []string, lookup map[string]int) {
	t.Helper()
	src := filepath.Join(cbuild.RepoRoot(), "hamicore", "src")
	bin := cbuild.Program(t, []string{"hamicore/src", "hamicore/include", "abi/include"},
		"testdata/names.c", filepath.Join(src, "limitsfile_vars.c"), filepath.Join(src, "fmt.c"))
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatalf("run %s: %v", bin, err)
	}
	lookup = map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("driver line %q", line)
		}
		id, err := strconv.Atoi(f[2])
		switch {
		case f[0] == "name" && f[1] == strconv.Itoa(len(names)):
			names = append(names, f[2])
		case f[0] == "lookup" && err == nil:
			lookup[f[1]] = id
		default:
			t.Fatalf("driver line %q", line)
		}
	}
	return names, lookup
}

// TestSameAsLibrary: the names this package gives are exactly those libvgpu.so reads, by the
// strings of the C table (lb_var_name), in its order; and the library looks each up as itself.
func TestSameAsLibrary(t *testing.T) {
	goNames := Names()
	cList, lookup := cNames(t, append(slices.Clone(goNames), MemoryLimit+"_16", SMLimit+"_01", "CUDA_DEVICE_SM_LIMITS")...)
	for _, n := range cList {
		if !slices.Contains(goNames, n) {
			t.Errorf("libvgpu reads %s; plugin/libvars does not name it", n)
		}
	}
	for i, n := range goNames {
		if !slices.Contains(cList, n) {
			t.Errorf("plugin/libvars names %s; libvgpu does not read it", n)
		} else if id := lookup[n]; id < 0 || id >= len(cList) || cList[id] != n {
			t.Errorf("libvgpu looks %s up as variable %d, not itself", n, id)
		}
		if i < len(cList) && cList[i] != n {
			t.Errorf("variable %d: Go %s, C %s (keep the library's order)", i, n, cList[i])
		}
	}
	for _, not := range []string{MemoryLimit + "_16", SMLimit + "_01", "CUDA_DEVICE_SM_LIMITS"} {
		if lookup[not] != -1 {
			t.Errorf("libvgpu reads %s as variable %d; it is none", not, lookup[not])
		}
	}
	if len(goNames) != len(cList) {
		t.Errorf("Go names %d variables, the library %d", len(goNames), len(cList))
	}
}

// TestPatterns: the patterns stand for the names, each name matched by one pattern.
func TestPatterns(t *testing.T) {
	pats := Patterns()
	if !slices.IsSorted(pats) {
		t.Errorf("patterns not sorted: %v", pats)
	}
	for _, n := range Names() {
		var hits []string
		for _, p := range pats {
			if prefix, ok := strings.CutSuffix(p, "<i>"); ok {
				if rest, ok := strings.CutPrefix(n, prefix); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
					hits = append(hits, p)
				}
			} else if p == n {
				hits = append(hits, p)
			}
		}
		if len(hits) != 1 {
			t.Errorf("%s matches patterns %v, want exactly one", n, hits)
		}
	}
	if want := fmt.Sprint(len(Names())); want != fmt.Sprint(2+2*Devices+len(fixed)) {
		t.Errorf("names %s", want)
	}
}
