package configref

import (
	"flag"
	"fmt"
	"testing"

	"github.com/limitbed/limitbed/plugin/internal/flagenv"
)

// NoTwin is what the environment column holds for a flag without an environment twin.
const NoTwin = "—"

// Empty is how the default column writes an empty default.
const Empty = `""`

// CheckFlags holds the FlagSet of a command against table id: every flag listed, with its
// environment twin (columns "environment") and its default (column "default"), and no flag
// listed that fs lacks. Flags in noTwin have no environment twin (flagenv's skip list).
func CheckFlags(root, id string, fs *flag.FlagSet, noTwin ...string) ([]string, error) {
	t, err := Get(root, id)
	if err != nil {
		return nil, err
	}
	skip := map[string]bool{}
	for _, s := range noTwin {
		skip[s] = true
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, "--"+f.Name) })
	problems := Diff(t, names)
	fs.VisitAll(func(f *flag.Flag) {
		r, ok := t.Row("--" + f.Name)
		if !ok {
			return
		}
		env := flagenv.EnvName(f.Name)
		if skip[f.Name] {
			env = NoTwin
		}
		if got := r.Cells["environment"]; got != env {
			problems = append(problems, fmt.Sprintf("%s:%d: --%s: environment %q, the code says %q", DocPath, r.Line, f.Name, got, env))
		}
		def := f.DefValue
		if def == "" {
			def = Empty
		}
		if got := r.Cells["default"]; got != def {
			problems = append(problems, fmt.Sprintf("%s:%d: --%s: default %q, the code says %q", DocPath, r.Line, f.Name, got, def))
		}
	})
	return problems, nil
}

// AssertFlags is the whole test a binary runs on its own flags: docs/configuration.md's table id
// lists every flag of fs with its environment twin and default, and no flag fs lacks.
func AssertFlags(tb testing.TB, id string, fs *flag.FlagSet, noTwin ...string) {
	tb.Helper()
	root, err := RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	problems, err := CheckFlags(root, id, fs, noTwin...)
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range problems {
		tb.Error(p)
	}
}
