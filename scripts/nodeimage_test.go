package scripts

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestNodeImageFailureNamesStepAndLog: when a step of the node image build fails, the terminal gets a
// few lines — which step failed, its log's last lines and the log's path — and the log has the
// step's whole output. Two failures: a Go build that fails after a wall of output (the cold
// build's "go: downloading" lines), and the Go module proxy unreachable (GOPROXY=off, an empty
// module cache: the real go command's own error).
func TestNodeImageFailureNamesStepAndLog(t *testing.T) {
	t.Parallel()
	needRoot(t, "scripts/node-image.sh builds only as root (debootstrap, chroot)")
	needTools(t, "go", "gcc", "jq")
	realGo, _ := exec.LookPath("go")
	const noise = 300
	fakeMod := filepath.Join(t.TempDir(), "kubernetes.mod")
	if err := os.WriteFile(fakeMod, []byte("module k8s.io/kubernetes\n\nrequire (\n\tk8s.io/api v0.0.0\n)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A go command whose module and package queries answer at once and whose build fails noisily.
	noisyGo := fmt.Sprintf(`case "$1" in
env) exec %q "$@" ;;
mod) echo '{"GoMod": "%s", "Dir": "/nonexistent"}' ;;
list) echo fmt; echo example.com/a ;;
build) i=0; while [ $i -lt %d ]; do echo "go: downloading example.com/m$i v1.0.0" >&2; i=$((i+1)); done
	echo "example.com/a/a.go:1:1: the compile error itself" >&2; exit 1 ;;
*) exit 2 ;;
esac`, realGo, fakeMod, noise)

	cases := []struct {
		name     string
		goStub   string // "" = the real go command
		vars     []string
		step     string   // the failed step, as reported
		inLog    []string // in the step's log
		inReport string   // in the few lines on the terminal
	}{
		{name: "noisy build", goStub: noisyGo, step: "kubernetes",
			inLog:    []string{"go: downloading example.com/m0 v1.0.0", fmt.Sprintf("example.com/m%d", noise-1), "the compile error itself"},
			inReport: "the compile error itself"},
		{name: "no module proxy", vars: []string{"GOPROXY=off", "GOMODCACHE=" + t.TempDir(), "GOCACHE=" + t.TempDir()},
			step: "kubernetes", inLog: []string{"GOPROXY=off"}, inReport: "GOPROXY=off"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tree := copyTree(t, "scripts/node-image.sh", "scripts/steps.sh", "images/node")
			bin := t.TempDir()
			stub(t, bin, "docker", "exit 1") // no image in the store
			stub(t, bin, "debootstrap", "echo stub debootstrap; exit 1")
			stub(t, bin, "containerd", "exit 1")
			stub(t, bin, "ctr", "exit 1")
			if tc.goStub != "" {
				stub(t, bin, "go", tc.goStub)
			}
			cache := t.TempDir()
			cmd := exec.Command(filepath.Join(tree, "scripts", "node-image.sh"))
			cmd.Env = env(bin, append([]string{"LIMITBED_CACHE=" + cache}, tc.vars...)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("node-image.sh: %v, want a failure; stderr:\n%s", err, stderr.String())
			}
			report := stderr.String()
			t.Logf("%s: exit %d after %s; stderr:\n%s", tc.name, ee.ExitCode(), time.Since(start).Round(time.Millisecond), report)
			if stdout.Len() != 0 {
				t.Errorf("stdout %q: a failed build must print no image name", stdout.String())
			}
			if !regexp.MustCompile(`FAILED: step \[\d+\] ` + regexp.QuoteMeta(tc.step)).MatchString(report) {
				t.Errorf("the report does not name the failed step %q", tc.step)
			}
			if !strings.Contains(report, tc.inReport) {
				t.Errorf("the report does not show the log's last lines (%q)", tc.inReport)
			}
			if n := len(lines(report)); n > 25 {
				t.Errorf("the report has %d lines, want a few (at most 25)", n)
			}
			if n := strings.Count(report, "go: downloading"); n > 8 {
				t.Errorf("the report repeats %d lines of the build's output", n)
			}
			m := regexp.MustCompile(`full log: (\S+)`).FindStringSubmatch(report)
			if m == nil {
				t.Fatalf("the report does not say where the full log is")
			}
			if !strings.HasPrefix(m[1], cache) {
				t.Errorf("log %s is not under LIMITBED_CACHE %s", m[1], cache)
			}
			log, err := os.ReadFile(m[1])
			if err != nil {
				t.Fatalf("the named log: %v", err)
			}
			for _, want := range tc.inLog {
				if !strings.Contains(string(log), want) {
					t.Errorf("log %s lacks %q", m[1], want)
				}
			}
		})
	}
}
