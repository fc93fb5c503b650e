package script_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/harness/sandbox/sandboxtest"
	"github.com/limitbed/limitbed/harness/script"
	"github.com/limitbed/limitbed/internal/cbuild"
)

// TestMain keeps testcontainers-go's banner out of the test output.
func TestMain(m *testing.M) {
	tclog.SetDefault(quiet{})
	os.Exit(m.Run())
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// TestScripts runs every scenario in testdata/script (LIMITBED_UPDATE=1 rewrites cmp goldens).
// Scenarios that need containers skip without a backend, naming it, except under CI=true.
func TestScripts(t *testing.T) {
	if testing.Short() {
		t.Skip("scenarios start containers: skipped with -short")
	}
	paths := cbuild.Build(t)
	root := cbuild.RepoRoot()
	testscript.Run(t, script.Params(script.Config{
		Dir:       filepath.Join(root, "testdata", "script"),
		Root:      root,
		Artifacts: node.Artifacts{Lib: paths.Lib, Bin: paths.Bin},
		Logger:    sandboxtest.Logger(t).With("test", t.Name()),
		Update:    os.Getenv("LIMITBED_UPDATE") == "1",
	}))
}
