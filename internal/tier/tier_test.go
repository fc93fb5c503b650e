package tier

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// helperEnv names the case TestHelperProcess plays when this test binary re-runs itself.
const helperEnv = "LIMITBED_TIER_HELPER_CASE"

// The cases the child plays: each ends its test for want of a tier that is missing here.
var helperCases = map[string]func(t *testing.T){
	"tool":     func(t *testing.T) { Require(t, Tool("limitbed-no-such-tool")) },
	"docker":   func(t *testing.T) { Unavailable(t, Docker, "no engine answers") },
	"gpu":      func(t *testing.T) { Unavailable(t, GPU, "no nvidia-smi") },
	"no-probe": func(t *testing.T) { Require(t, Docker) },
}

// TestHelperProcess is the child of TestMissingTierUnderCI: it does nothing in a normal run.
func TestHelperProcess(t *testing.T) {
	name := os.Getenv(helperEnv)
	if name == "" {
		return
	}
	helperCases[name](t)
	t.Log("reached the end: the tier did not end the test")
}

// A missing tier that CI provides skips with its condition and fix named, and under CI=true
// fails with the same words; a GPU stays a skip under CI=true (CI has none). The test binary
// re-runs itself with the condition missing, with and without CI, and reads the verdict.
func TestMissingTierUnderCI(t *testing.T) {
	for _, tc := range []struct {
		name, ci string
		wantFail bool
		want     string
	}{
		{"tool", "", false, "needs limitbed-no-such-tool installed: "},
		{"tool", "true", true, "CI=true: CI provides this, so this is a failure"},
		{"tool", "false", false, "scripts/install-deps.sh installs it"},
		{"docker", "", false, "needs a Docker engine: no engine answers (start one with scripts/docker-up.sh)"},
		{"docker", "true", true, "needs a Docker engine: no engine answers"},
		{"gpu", "", false, "needs an NVIDIA GPU and driver: no nvidia-smi (run on a GPU machine"},
		{"gpu", "true", false, "needs an NVIDIA GPU and driver"},
		{"no-probe", "", true, "has no probe here"},
	} {
		t.Run(tc.name+"/CI="+tc.ci, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v", "-test.count=1")
			cmd.Env = append(withoutCI(os.Environ()), helperEnv+"="+tc.name)
			if tc.ci != "" {
				cmd.Env = append(cmd.Env, "CI="+tc.ci)
			}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("running the child: %v", err)
			}
			failed := err != nil
			verdict := "--- SKIP: TestHelperProcess"
			if tc.wantFail {
				verdict = "--- FAIL: TestHelperProcess"
			}
			if failed != tc.wantFail || !strings.Contains(string(out), verdict) || !strings.Contains(string(out), tc.want) {
				t.Errorf("child (failed %v, want %v) does not say %q and %q:\n%s", failed, tc.wantFail, verdict, tc.want, out)
			}
			if strings.Contains(string(out), "reached the end") {
				t.Errorf("the missing tier did not end the child's test:\n%s", out)
			}
		})
	}
}

func withoutCI(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CI=") {
			out = append(out, kv)
		}
	}
	return out
}

// Root's probe agrees with the process's uid; its message names the condition and the fix.
func TestRootProbe(t *testing.T) {
	err := Root.probe()
	if (err == nil) != (os.Geteuid() == 0) {
		t.Errorf("Root probe = %v as uid %d", err, os.Geteuid())
	}
	if got := Message(Root, "running as uid 1000"); got != "needs root: running as uid 1000 (run the tests as root: sudo make test)" {
		t.Errorf("Message(Root) = %q", got)
	}
	if got := Message(Root.For("unshare -m"), ""); got != "needs root for unshare -m (run the tests as root: sudo make test)" {
		t.Errorf("Message(Root.For) = %q", got)
	}
	if err := Docker.Probe(); err == nil || !strings.Contains(err.Error(), "no probe here") {
		t.Errorf("Docker.Probe() = %v: the caller probes Docker, the tier cannot", err)
	}
	if (Root.Probe() == nil) != (os.Geteuid() == 0) {
		t.Errorf("Root.Probe() = %v as uid %d", Root.Probe(), os.Geteuid())
	}
	if !Root.CIProvides() || GPU.CIProvides() {
		t.Errorf("CI provides root (%v), not a GPU (%v)", Root.CIProvides(), GPU.CIProvides())
	}
}
