package scripts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// runSteps runs a bash script that sources scripts/steps.sh, with the given heartbeat interval.
func runSteps(t *testing.T, heartbeat, body string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "job.sh")
	src := "set -euo pipefail\n. " + filepath.Join(repoRoot(t), "scripts", "steps.sh") + "\n" +
		"steps_init demo " + filepath.Join(dir, "logs") + "\ntrap 'steps_on_exit $?' EXIT\n" + body
	if err := os.WriteFile(script, []byte(src), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", script)
	cmd.Env = append(os.Environ(), "LIMITBED_STEP_HEARTBEAT_S="+heartbeat)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out // a pipe: Run returns when every writer has closed it
	err := cmd.Run()
	return out.String(), err
}

// TestStepsProgressAndSummary: a heartbeat with the step's own progress note while it runs, every
// step's duration and the total at the end; a step may set the caller's variables; the step's
// output stays in its log.
func TestStepsProgressAndSummary(t *testing.T) {
	t.Parallel()
	out, err := runSteps(t, "1", `
progress() { echo "$(wc -l <"$1") lines so far"; }
STEP_PROGRESS=progress
step "slow step" bash -c 'for i in 1 2 3; do echo "output $i"; sleep 1; done'
STEP_PROGRESS=
set_global() { G=42; echo "set"; }
step "sets a global" set_global
[ "$G" = 42 ]
steps_summary
`)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, re := range []string{
		`(?m)^demo: \[1\] slow step \.\.\.$`,
		`(?m)^demo:     slow step: 0 min \d s, \d lines so far$`,
		`(?m)^demo: \[1\] slow step done in \ds$`,
		`(?m)^demo: \[2\] sets a global done in 0s$`,
		`(?m)^demo:   slow step +\d s$`,
		`(?m)^demo:   sets a global +0 s$`,
		`(?m)^demo:   total +\d s$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output lacks %s:\n%s", re, out)
		}
	}
	if strings.Contains(out, "output 1") || strings.Contains(out, "set\n") {
		t.Errorf("a step's output reached the terminal:\n%s", out)
	}
}

// TestStepsFailureKeepsErrexit: a command failing inside a step's function ends the script there
// (set -e holds inside steps), and the report names that step; the heartbeat's sleep does not keep
// the script's output open after it ends.
func TestStepsFailureKeepsErrexit(t *testing.T) {
	t.Parallel()
	start := time.Now()
	out, err := runSteps(t, "30", `
fails() { echo "before"; false; echo "after the failure"; }
step "ok" true
step "fails inside" fails
echo "the script went on" >&2
`)
	if err == nil {
		t.Fatalf("the script succeeded:\n%s", out)
	}
	if strings.Contains(out, "went on") || !strings.Contains(out, "FAILED: step [2] fails inside") {
		t.Errorf("the failure did not end the script at the step, or the step is not named:\n%s", out)
	}
	m := regexp.MustCompile(`full log: (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no log named:\n%s", out)
	}
	log, _ := os.ReadFile(m[1])
	if !strings.Contains(string(log), "before") || strings.Contains(string(log), "after the failure") {
		t.Errorf("the step's log %q: want the output up to the failing command only", log)
	}
	// The heartbeat sleeps 30 s at a time; the script itself ends at once.
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the script's output stayed open for %s after it ended: the heartbeat's sleep held it", d)
	}
}
