package tier

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
)

// optIn are the skips that are not the machine's doing, each with its reason: a test that runs
// only when asked.
var optIn = map[string]string{
	"harness/memjudge/judge_test.go": "TestMemJudgeReplay replays a sequence only when MEMJUDGE_REPLAY names one",
}

// TestMachineSkipsGoThroughTier: a test skips only under -short, when it is asked for by name
// (optIn), or through this package, which names what the machine lacks and how to provide it, and
// fails under CI=true for what CI provides. A t.Skip of its own would pass silently on CI.
func TestMachineSkipsGoThroughTier(t *testing.T) {
	root := cbuild.RepoRoot()
	var found []string
	seen := 0
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
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if !strings.HasSuffix(p, ".go") || strings.HasPrefix(rel, "internal/tier/") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, call := range skips(f) {
			seen++
			if optIn[rel] == "" {
				found = append(found, rel+": "+call)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen == 0 {
		t.Fatal("no skip found anywhere: the walk no longer reads the tests")
	}
	if len(found) > 0 {
		slices.Sort(found)
		t.Errorf("these skip on their own, outside -short; say what the machine lacks with tier.Require or tier.Unavailable:\n%s",
			strings.Join(found, "\n"))
	}
}

// skips returns the Skip, Skipf and SkipNow calls of f that are not in the body of an
// `if testing.Short()` (the -short skips, which are the runner's choice, not the machine's).
func skips(f *ast.File) []string {
	var out []string
	var walk func(n ast.Node, short bool)
	walk = func(n ast.Node, short bool) {
		ast.Inspect(n, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.IfStmt:
				if isShort(n.Cond) {
					if n.Init != nil {
						walk(n.Init, short)
					}
					walk(n.Body, true)
					if n.Else != nil {
						walk(n.Else, short)
					}
					return false
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && !short {
					switch sel.Sel.Name {
					case "Skip", "Skipf", "SkipNow":
						out = append(out, sel.Sel.Name)
					}
				}
			}
			return true
		})
	}
	walk(f, false)
	return out
}

// isShort: the condition is testing.Short().
func isShort(e ast.Expr) bool {
	c, ok := e.(*ast.CallExpr)
	if !ok || len(c.Args) != 0 {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Short" {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "testing"
}
