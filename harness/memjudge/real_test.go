package memjudge_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/internal/tier"
)

// TestRealScriptOnFakegpu runs the GPU check's judge (real.sh, nvidia-smi's per-process figures as
// the truth) on a fake two-GPU host, with fgtruth --csv printing what nvidia-smi would: the
// script the nightly GPU job runs is itself tested here, in exec and login sessions.
func TestRealScriptOnFakegpu(t *testing.T) {
	p := cbuild.Build(t)
	modes := []string{"env"}
	if os.Geteuid() == 0 {
		modes = append(modes, "login")
	} else {
		tier.Require(t, tier.Root.For("real.sh's login session (unshare -m)"))
	}
	profile, err := os.ReadFile(filepath.Join(p.Root, "fakegpu", "profiles", "2x-a16-16q.profile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			// The file is named "profile" where the session finds it too (/etc/fakegpu/profile):
			// fakegpu names its state file after it, and the host's fgtruth must read the same.
			prof := filepath.Join(dir, "profile")
			state := filepath.Join(dir, "gpu")
			if err := os.WriteFile(prof, profile, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(state, 0o1777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			host := "FAKEGPU_PROFILE=" + prof + " FAKEGPU_STATE_DIR=" + state
			cmd := exec.Command(filepath.Join(p.Root, "harness", "memjudge", "real.sh"), mode)
			cmd.Env = append(os.Environ(),
				"JUDGE_MEMLOAD="+filepath.Join(p.Bin, "memload"),
				"JUDGE_LIB="+filepath.Join(p.Lib, "libvgpu.so"),
				"JUDGE_TRUTH=env "+host+" "+filepath.Join(p.Bin, "fgtruth")+" --csv",
				"JUDGE_GPUS=2",
				"TMPDIR="+dir)
			if mode == "env" {
				cmd.Env = append(cmd.Env, "JUDGE_ENV="+host)
			} else {
				cmd.Env = append(cmd.Env, "JUDGE_NS_ARGS=--file /etc/fakegpu/profile="+prof+
					" --bind "+state+" --bind /run/fakegpu="+state+" --bind "+p.Lib)
			}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			text := out.String()
			if err != nil || strings.Contains(text, "FAIL") {
				t.Fatalf("real.sh %s: %v\n%s", mode, err, text)
			}
			passed := strings.Count(text, "PASS ")
			// Every class judged, the two-GPU one included.
			for _, class := range []string{"paths", "legacy", "program-chosen", "contexts", "tables", "reentrancy",
				"imports", "liveness", "kill", "ordinal"} {
				if !strings.Contains(text, "judge "+mode+" "+class+":") {
					t.Errorf("real.sh %s: no check of %s\n%s", mode, class, text)
				}
			}
			t.Logf("real.sh %s: %d checks passed", mode, passed)
		})
	}
}
