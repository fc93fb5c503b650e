package configref

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const sample = "# t\n\n<!-- configref:a -->\n\n| name | default | x |\n|---|---|---|\n| `--one` | `1` | y |\n| `two` | `\"\"` | a \\| b |\n\ntext\n<!-- configref:b -->\n| k | v |\n|---|---|\n| `k1` | plain |\n"

func TestParse(t *testing.T) {
	tabs, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	a, b := tabs["a"], tabs["b"]
	if a == nil || b == nil || len(tabs) != 2 {
		t.Fatalf("tables = %v", tabs)
	}
	if got := a.Names(); !reflect.DeepEqual(got, []string{"--one", "two"}) {
		t.Errorf("a names = %v", got)
	}
	r, _ := a.Row("two")
	if r.Cells["default"] != `""` || r.Cells["x"] != "a | b" || r.Line != 8 {
		t.Errorf("row two = %+v", r)
	}
	if r, _ := b.Row("k1"); r.Cells["v"] != "plain" {
		t.Errorf("row k1 = %+v", r)
	}
}

func TestParseRejects(t *testing.T) {
	for _, tc := range []struct{ name, doc, mention string }{
		{"marker without table", "<!-- configref:a -->\ntext\n", "not followed by a table"},
		{"marker at end", "<!-- configref:a -->\n", "not followed by a table"},
		{"duplicate id", "<!-- configref:a -->\n| n |\n|---|\n<!-- configref:a -->\n| n |\n", "marked twice"},
		{"name not code", "<!-- configref:a -->\n| n |\n|---|\n| plain |\n", "is not one `name`"},
		{"duplicate row", "<!-- configref:a -->\n| n |\n|---|\n| `x` |\n| `x` |\n", "twice"},
		{"empty id", "<!-- configref: -->\n| n |\n", "empty configref marker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("err = %v, want %q", err, tc.mention)
			}
		})
	}
}

func TestDiffNamesBothDirections(t *testing.T) {
	tabs, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	got := Diff(tabs["a"], []string{"--one", "three"})
	if len(got) != 2 || !strings.Contains(strings.Join(got, "\n"), `does not list "three"`) ||
		!strings.Contains(strings.Join(got, "\n"), `lists "two", which the code no longer has`) {
		t.Fatalf("Diff = %q", got)
	}
	if got := Diff(tabs["a"], []string{"two", "--one"}); len(got) != 0 {
		t.Fatalf("Diff of a match = %q", got)
	}
}

// TestCheckFlagsCatchesDrift plants each kind of drift in a reference and a FlagSet.
func TestCheckFlagsCatchesDrift(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	doc := "<!-- configref:flags/x -->\n| flag | environment | default |\n|---|---|---|\n" +
		"| `--a-b` | `A_B` | `\"\"` |\n| `--c` | `WRONG` | `1` |\n| `--gone` | `GONE` | `\"\"` |\n| `--v` | — | `0` |\n"
	if err := os.WriteFile(filepath.Join(root, DocPath), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("a-b", "", "")
	fs.Int("c", 2, "")
	fs.Bool("new", false, "")
	fs.Int("v", 0, "")
	problems, err := CheckFlags(root, "flags/x", fs, "v")
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(problems, "\n")
	for _, want := range []string{`does not list "--new"`, `lists "--gone"`, `--c: environment "WRONG", the code says "C"`, `--c: default "1", the code says "2"`} {
		if !strings.Contains(all, want) {
			t.Errorf("problems lack %q:\n%s", want, all)
		}
	}
	if len(problems) != 4 {
		t.Errorf("%d problems, want 4:\n%s", len(problems), all)
	}
}

func TestJSONFields(t *testing.T) {
	type inner struct {
		X *int `json:"x,omitempty"`
	}
	type inl struct {
		Y *bool `json:"y,omitempty"`
	}
	type item struct {
		Name string `json:"name"`
	}
	type top struct {
		V     string   `json:"version"`
		In    *inner   `json:"in,omitempty"`
		Items []item   `json:"items"`
		Skip  string   `json:"-"`
		List  []string `json:"list"`
		inl   `json:",inline"`
	}
	got := JSONFields(top{})
	want := []string{"in.x", "items[].name", "list", "version", "y"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("JSONFields = %v, want %v", got, want)
	}
}

func TestHelmValuesAndDefaults(t *testing.T) {
	p := filepath.Join(t.TempDir(), "values.yaml")
	yml := "a:\n  b: x\n  c: \"\"\n  d: 3\nlist:\n  - operator: Exists\nempty: {}\nnested:\n  deep:\n    enabled: true\n"
	if err := os.WriteFile(p, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := HelmValues(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a.b": "x", "a.c": `""`, "a.d": "3", "list": `[{"operator":"Exists"}]`, "empty": "{}", "nested.deep.enabled": "true"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("HelmValues = %v, want %v", got, want)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte("<!-- configref:a -->\n| n |\n|---|\n| `x` |\n"))
	f.Add([]byte("| `x` | y |\n<!-- configref:z -->"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tabs, err := Parse(b)
		if err != nil {
			return
		}
		for id, tab := range tabs {
			if id == "" || tab.ID != id {
				t.Fatalf("table id %q / %q", id, tab.ID)
			}
			seen := map[string]bool{}
			for _, r := range tab.Rows {
				if r.Name == "" || seen[r.Name] || strings.Contains(r.Name, "`") {
					t.Fatalf("bad row %+v", r)
				}
				seen[r.Name] = true
			}
		}
	})
}
