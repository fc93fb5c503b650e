package codesize

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
)

// pendingFile lists the offenders being split elsewhere at the time of writing, one key a line
// (Offender.Key). It is held both ways: an offender not listed fails, and so does a listed one
// that no longer offends, so the list only shrinks and ends empty.
const pendingFile = "pending.txt"

func readPending(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(pendingFile)
	if err != nil {
		t.Fatalf("%s: %v", pendingFile, err)
	}
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out[l] = true
		}
	}
	return out
}

// Every production file of the repository within MaxFileLines, every function within
// MaxFuncLines or saying why; every offender is listed.
func TestRepoWithinSizeLimits(t *testing.T) {
	offenders, err := Walk(cbuild.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	pending := readPending(t)
	var fresh []string
	for _, o := range offenders {
		if pending[o.Key()] {
			t.Logf("pending: %s", o)
			delete(pending, o.Key())
			continue
		}
		fresh = append(fresh, o.String())
	}
	if len(fresh) > 0 {
		t.Errorf("%d offender(s) of the size limits:\n%s", len(fresh), strings.Join(fresh, "\n"))
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range pending {
			if !yield(k) {
				return
			}
		}
	}) {
		t.Errorf("%s lists %q, which is within the limits now: take it off the list", pendingFile, k)
	}
}

func TestGoFuncs(t *testing.T) {
	body := strings.Repeat("\t_ = 1\n", 80)
	src := "package p\n\n// short says nothing.\nfunc short() {}\n\n" +
		"func long() {\n" + body + "}\n\n" +
		"// reasoned is one table.\n// long: one table of every case, read top to bottom.\nfunc reasoned() {\n" + body + "}\n\n" +
		"// bare has the marker and no reason after it.\n// long:\nfunc bare() {\n" + body + "}\n\n" +
		"type T[K any] struct{}\n\nfunc (t *T[K]) m() {\n" + body + "}\n"
	fs, err := GoFuncs("p.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	got := describe(fs)
	want := []string{"short 4-4 1 false", "long 6-87 82 false", "reasoned 91-172 82 true", "bare 176-257 82 false", "T.m 261-342 82 false"}
	if !slices.Equal(got, want) {
		t.Errorf("GoFuncs:\n got %q\nwant %q", got, want)
	}
	offs, err := Check("p.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range offs {
		names = append(names, o.Key())
	}
	if want := []string{"p.go long", "p.go bare", "p.go T.m"}; !slices.Equal(names, want) {
		t.Errorf("Check: %q, want %q", names, want)
	}
}

func describe(fs []Func) []string {
	var out []string
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%s %d-%d %d %v", f.Name, f.Start, f.End, f.Lines(), f.LongReasons))
	}
	return out
}

// The C reader: braces in comments, strings, characters and preprocessor lines are not code;
// initialisers, aggregates and prototypes are not functions; a return type on its own line
// starts the function; the doc comment just above, and only it, can give the reason.
func TestCFuncs(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"plain", "int f(void)\n{\n\treturn 0;\n}\n", []string{"f 1-4 4 false"}},
		{"return type above", "static int\nf(int a)\n{\n\treturn a;\n}\n", []string{"f 1-5 5 false"}},
		{"braces not code", "/* { */\n#define X {\n#define Y \\\n  {\nint f(void) { const char *s = \"}{\"; char c = '{'; // }\n\treturn 0; }\n",
			[]string{"f 5-6 2 false"}},
		{"not functions", "struct s { int a; };\nstatic const int t[] = { 1, 2 };\nint g(int (*cb)(void));\nenum e { A, B };\nint h(void) { return 0; }\n",
			[]string{"h 5-5 1 false"}},
		{"attribute", "__attribute__((visibility(\"default\"))) int cuInit(unsigned f) {\n\treturn 0;\n}\n", []string{"cuInit 1-3 3 false"}},
		{"doc marker", "/* long: one switch over\n * every call */\nint f(void)\n{\n}\n// other\n\nint g(void)\n{\n}\n", []string{"f 3-5 3 true", "g 8-10 3 false"}},
		{"line comments", "// a\n// long: a table\n// b\nint f(void) {\n}\n", []string{"f 4-5 2 true"}},
		{"marker not adjacent", "// long: a table\n\nint f(void) {\n}\n", []string{"f 3-4 2 false"}},
		{"nested", "int f(int a) {\n\tif (a) {\n\t\tswitch (a) { case 1: { break; } }\n\t}\n\treturn a;\n}\nint g(void) { return 1; }\n",
			[]string{"f 1-6 6 false", "g 7-7 1 false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := CFuncs("x.c", []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(fs); !slices.Equal(got, tc.want) {
				t.Errorf("CFuncs:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"int f(void) {\n", "}\n"} {
		if _, err := CFuncs("bad.c", []byte(bad)); err == nil {
			t.Errorf("CFuncs(%q): no error for unbalanced braces", bad)
		}
	}
}

func TestProduction(t *testing.T) {
	for p, want := range map[string]bool{
		"plugin/region/region.go": true, "plugin/region/region_test.go": false,
		"hamicore/src/memory.c": true, "hamicore/include/limitbed/region.h": true, "abi/include/limitbed/cuda_abi.h": true,
		"hamicore/test/allocprobe.c": false, "fakegpu/tools/gpuinfo.c": false, "harness/memjudge/memload/memload.c": true,
		"README.md": false,
	} {
		if got := Production(p); got != want {
			t.Errorf("Production(%s) = %v, want %v", p, got, want)
		}
	}
}

// Walk finds what Check finds, file by file, and skips testdata and build output.
func TestWalk(t *testing.T) {
	root := t.TempDir()
	long := "package p\n" + strings.Repeat("// x\n", MaxFileLines)
	for p, src := range map[string]string{
		"plugin/a/a.go":          long,
		"plugin/a/a_test.go":     long,
		"plugin/a/testdata/b.go": long,
		"build/c.go":             long,
		"plugin/a/gen.go":        "// Code generated by x. DO NOT EDIT.\n\n" + long,
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	offs, err := Walk(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(offs) != 1 || offs[0].Key() != "plugin/a/a.go" || offs[0].Lines != MaxFileLines+1 {
		t.Errorf("Walk = %v, want plugin/a/a.go alone, %d lines", offs, MaxFileLines+1)
	}
}

func FuzzCFuncs(f *testing.F) {
	f.Add([]byte("int f(void)\n{\n\treturn 0;\n}\n"))
	f.Add([]byte("/* { */ #define X {\nstruct s { int a; }; int g(void) { char c = '\\''; return \"}\"[0]; }"))
	f.Add([]byte("}{"))
	f.Fuzz(func(t *testing.T, src []byte) {
		fs, err := CFuncs("f.c", src)
		if err != nil {
			return
		}
		lines := CountLines(src)
		for _, fn := range fs {
			if fn.Start < 1 || fn.End < fn.Start || fn.End > lines+1 {
				t.Fatalf("function %+v outside the file's %d lines", fn, lines)
			}
		}
	})
}
