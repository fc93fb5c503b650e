package tier

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
)

// ciReaders are the Go files allowed to read the CI variable, each with its reason.
var ciReaders = map[string]string{
	"internal/tier/tier.go": "the one helper",
	// A command, not a test: production code does not link this test helper. Under CI the matrix
	// requires the workload image's nvidia-smi in every cell.
	"harness/cmd/limitbed/matrix.go": "limitbed matrix, a command",
}

// Every test says what it needs through this package, so nothing else reads CI: a second reader
// would be a second rule for what CI provides (and the place a bound gets loosened on CI).
func TestOnlyTierReadsCI(t *testing.T) {
	root := cbuild.RepoRoot()
	var found []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "build" || n == "build-san" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if readsCI(f) && ciReaders[rel] == "" {
			found = append(found, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		slices.Sort(found)
		t.Errorf("these read the CI variable themselves; use tier.CI, tier.Require or tier.Unavailable:\n%s", strings.Join(found, "\n"))
	}
}

// readsCI: a call of os.Getenv or os.LookupEnv with the literal "CI".
func readsCI(f *ast.File) bool {
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok || len(c.Args) != 1 {
			return true
		}
		sel, ok := c.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "Getenv" && sel.Sel.Name != "LookupEnv") {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "os" {
			return true
		}
		if lit, ok := c.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if v, err := strconv.Unquote(lit.Value); err == nil && v == "CI" {
				found = true
			}
		}
		return true
	})
	return found
}

func TestReadsCI(t *testing.T) {
	for src, want := range map[string]bool{
		`package p; import "os"; var _ = os.Getenv("CI") == "true"`:      true,
		`package p; import "os"; func f() { _, _ = os.LookupEnv("CI") }`: true,
		`package p; import "os"; var _ = os.Getenv("CIX")`:               false,
		`package p; import "os"; var _ = os.Getenv("SAN")`:               false,
	} {
		f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := readsCI(f); got != want {
			t.Errorf("readsCI(%s) = %v, want %v", src, got, want)
		}
	}
}
