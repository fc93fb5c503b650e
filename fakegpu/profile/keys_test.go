package profile

import (
	"go/ast"
	goparser "go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
)

// TestParseKeys holds keys.def's reader to what it must refuse.
func TestParseKeys(t *testing.T) {
	for _, tc := range []struct{ name, def, want string }{
		{"a line", "FG_KEY(GLOBAL, a, a, U64, 0, 0, 5)\n", ""},
		{"no keys", "/* nothing */\n", "0 keys"},
		{"a malformed line", "FG_KEY(GLOBAL, a, a, U64, 0, 0)\n", "is not FG_KEY"},
		{"an unknown scope", "FG_KEY(POD, a, a, U64, 0, 0, 0)\n", "unknown scope"},
		{"an unknown type", "FG_KEY(GLOBAL, a, a, FLOAT, 0, 0, 0)\n", "type FLOAT"},
		{"a key twice", "FG_KEY(GLOBAL, a, a, U64, 0, 0, 0)\nFG_KEY(DEVICE, a, a, U64, 0, 0, 0)\n", "twice"},
		{"a text without a size", "FG_KEY(GLOBAL, a, a, STR, 0, 0, 0)\n", "a size for a text key"},
		{"a size for a number", "FG_KEY(GLOBAL, a, a, U64, 8, 0, 0)\n", "a size for a text key"},
		{"a default for a text", "FG_KEY(GLOBAL, a, a, STR, 8, 0, 3)\n", "a default only for a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseKeys(tc.def)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("parseKeys: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestKeysDefIsTheOneTable: keys.def is the profile's only table of keys. Both readers are built
// from it (the C one includes it; TestSameAsFakegpu compares what they read, key by key), and no
// other source of fakegpu spells the keys out: a file naming more than a quarter of them as
// string literals holds a copy of the table, which the next key would have to be added to.
func TestKeysDefIsTheOneTable(t *testing.T) {
	if len(keys) < 30 {
		t.Fatalf("keys.def has %d keys: not the profile's table", len(keys))
	}
	root := filepath.Join(cbuild.RepoRoot(), "fakegpu")
	names := map[string]bool{}
	for _, k := range keys {
		names[k.name] = true
	}
	limit := len(keys) / 4
	checked := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "test") {
			return filepath.SkipDir
		}
		ext := filepath.Ext(path)
		if d.IsDir() || strings.HasSuffix(path, "_test.go") || (ext != ".go" && ext != ".c" && ext != ".h") {
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		spelled := keyLiterals(t, path, text, names)
		if len(spelled) > limit {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("fakegpu/%s spells %d of the %d profile keys (%s …): a copy of keys.def's table; read the keys from keys.def",
				rel, len(spelled), len(keys), strings.Join(spelled[:3], ", "))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("checked %d source files under %s: not fakegpu's sources", checked, root)
	}
}

var cString = regexp.MustCompile(`"((?:[^"\\\n]|\\.)*)"`)

// keyLiterals returns the distinct keys a source spells as a whole string literal: in Go not
// counting struct tags (a field naming the key it keeps is the code that uses it).
func keyLiterals(t *testing.T, path string, text []byte, names map[string]bool) []string {
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if names[s] && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	if filepath.Ext(path) != ".go" {
		for _, m := range cString.FindAllStringSubmatch(string(text), -1) {
			add(m[1])
		}
		return out
	}
	f, err := goparser.ParseFile(token.NewFileSet(), path, text, 0)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tags := map[*ast.BasicLit]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if fl, ok := n.(*ast.Field); ok && fl.Tag != nil {
			tags[fl.Tag] = true
		}
		return true
	})
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && !tags[lit] {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				add(s)
			}
		}
		return true
	})
	return out
}
