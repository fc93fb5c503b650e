package matrix

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/harness/sandbox/sandboxtest"
	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/internal/tier"
	"github.com/limitbed/limitbed/plugin/launch"
)

// TestPluginOldBinary runs a reduced matrix (the v2.10 plugin with the current core in file mode;
// exec, which keeps the environment, and `su -`, which loses it) twice: with the in-process
// hami-v2.10 profile, and with limitbed's plugin binary started with --compat-profile=hami-v2.10 as
// the old plugin (the --plugin-old path: fake kubelet, fake API server, real process). Both runs
// must give the design's verdicts (exec capped, su - escapes), hence the same ones. Skips without a
// backend, except under CI=true.
func TestPluginOldBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers: skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	logger := sandboxtest.Logger(t)
	backend, err := node.SelectBackend(ctx, logger, "")
	if err != nil {
		tier.Unavailable(t, tier.Backend, err.Error())
	}
	paths := cbuild.Build(t)
	exp, err := LoadExpected(filepath.Join(paths.Root, "testdata", "matrix", "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var methods []launch.Method
	for _, name := range []string{"exec", "su -"} {
		m, err := launch.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		methods = append(methods, m)
	}
	bin, err := node.BuildPluginBinary(ctx, paths.Root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	combo := Combo{Plugin: "hami-v2.10", Core: "current", Delivery: "file"}
	run := func(old *node.ExternalPlugin) Report {
		r := &Runner{
			Backend: backend, Artifacts: node.Artifacts{Lib: paths.Lib, Bin: paths.Bin},
			GPUProfile: filepath.Join(paths.Root, "fakegpu", "profiles", "a16-16q.profile"),
			Expected:   exp, PluginOld: old, Methods: methods, Combos: []Combo{combo}, Logger: logger,
		}
		rep, err := r.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	inProcess := run(nil)
	external := run(&node.ExternalPlugin{Path: bin, Args: []string{"--compat-profile=hami-v2.10"}})
	if external.PluginOld == "" {
		t.Fatal("report does not name the old plugin")
	}
	want := map[string]bool{"exec": true, "su -": false}
	for _, rep := range []Report{inProcess, external} {
		if len(rep.Results) != len(methods) {
			t.Fatalf("%d results, want %d:\n%s", len(rep.Results), len(methods), Markdown(rep))
		}
		for i, res := range rep.Results {
			if !res.Match || res.Enforced != want[res.Method] || res.Enforced != inProcess.Results[i].Enforced {
				t.Errorf("plugin-old %q, %s: enforced %v (want %v, in process %v), why %v", rep.PluginOld, res.Method,
					res.Enforced, want[res.Method], inProcess.Results[i].Enforced, res.Why)
			}
		}
	}
	t.Logf("with the binary:\n%s", Markdown(external))
}
