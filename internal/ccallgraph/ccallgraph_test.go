package ccallgraph

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLoops(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edges map[string][]string
		want  [][]string
	}{
		{"none", map[string][]string{"a": {"b"}, "b": {"c"}}, nil},
		{"two files", map[string][]string{"a": {"b"}, "b": {"a"}}, [][]string{{"a", "b"}}},
		{"through a third", map[string][]string{"init": {"mem"}, "mem": {"ctx"}, "ctx": {"init"}, "log": nil},
			[][]string{{"ctx", "init", "mem"}}},
		{"two loops", map[string][]string{"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}},
			[][]string{{"a", "b"}, {"c", "d"}}},
		{"a diamond is no loop", map[string][]string{"a": {"b", "c"}, "b": {"d"}, "c": {"d"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &Graph{Edges: map[string]map[string]string{}}
			seen := map[string]bool{}
			for from, tos := range tc.edges {
				for _, f := range append([]string{from}, tos...) {
					if !seen[f] {
						seen[f] = true
						g.Files = append(g.Files, f)
					}
				}
				for _, to := range tos {
					g.add(from, to, "sym_"+to)
				}
			}
			if got := g.Loops(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Loops() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestReadObjects compiles three small files, two of which call each other, and finds that loop
// with the symbols that make it.
func TestReadObjects(t *testing.T) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc, which builds the C libraries this package checks, is not installed: %v", err)
	}
	dir := t.TempDir()
	srcs := map[string]string{
		"ctx.c":  "void mem_gone(void);\nint ctx_alive;\nvoid ctx_die(void) { mem_gone(); }\n",
		"mem.c":  "extern int ctx_alive;\nint log_line(const char *);\nvoid mem_gone(void) { if (ctx_alive) log_line(\"x\"); }\n",
		"log.c":  "#include <stdio.h>\nint log_line(const char *s) { return puts(s); }\n",
		"leaf.c": "static int helper(void) { return 1; }\nint leaf(void) { return helper(); }\n",
	}
	var objs []string
	for name, src := range srcs {
		c := filepath.Join(dir, name)
		if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		o := strings.TrimSuffix(c, ".c") + ".o"
		if out, err := exec.Command(cc, "-std=c11", "-O2", "-fPIC", "-c", "-o", o, c).CombinedOutput(); err != nil {
			t.Fatalf("compile %s: %v\n%s", name, err, out)
		}
		objs = append(objs, o)
	}
	g, err := Read(objs)
	if err != nil {
		t.Fatal(err)
	}
	loops := g.Loops()
	if want := [][]string{{"ctx", "mem"}}; !reflect.DeepEqual(loops, want) {
		t.Fatalf("Loops() = %v, want %v", loops, want)
	}
	desc := g.Describe(loops[0])
	for _, want := range []string{"ctx.c -> mem.c (mem_gone)", "mem.c -> ctx.c (ctx_alive)"} {
		if !strings.Contains(desc, want) {
			t.Errorf("Describe() = %q, missing %q", desc, want)
		}
	}
	if strings.Contains(desc, "log.c") {
		t.Errorf("Describe() names log.c, which is in no loop: %q", desc)
	}
}

func TestReadNothing(t *testing.T) {
	if _, err := Read(nil); err == nil {
		t.Fatal("Read(nil) succeeded; an empty library must be an error, not a graph without loops")
	}
}
