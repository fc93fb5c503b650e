package selftest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/harness/gpureport/schema"
)

// deterministic are the sections whose checks do not depend on timing: on fakegpu they pass
// (or, not as root, skip their login-session parts).
var deterministic = []string{"memory", "paths", "legacy", "judge", "drivertruth"}

// identityRows are fidelity rows that must agree exactly when the card is fakegpu itself.
var identityRows = []string{"NVML total memory", "SM count", "compute capability", "memory per context (NVML, per process)",
	"cuMemGetInfo total", "VMM granularity, minimum", "device memory per 1 MiB cuMemAlloc (64 of them)"}

func checkFullRun(t *testing.T, dir string, r *schema.Report, out string) {
	t.Helper()
	if c := r.Run.Card; !c.FakeGPU || c.Name != "NVIDIA H100 80GB HBM3" || c.Profile != "h100-80g" {
		t.Errorf("the card: %+v, want fakegpu's NVIDIA H100 80GB HBM3 with profile h100-80g", c)
	}
	status := map[string]string{}
	var took []string
	for _, s := range r.Sections {
		took = append(took, fmt.Sprintf("%s %.0f s", s.Name, s.Seconds))
		status[s.Name] = s.Status
		if s.Status == schema.StatusError || s.Status == schema.StatusTimeout {
			log, _ := os.ReadFile(filepath.Join(dir, s.Log))
			t.Errorf("section %s broke (%s, exit %d):\n%s", s.Name, s.Status, s.Exit, tail(string(log), 30))
		}
	}
	t.Logf("sections: %s", strings.Join(took, ", "))
	for _, s := range sections {
		if status[s] == "" {
			t.Errorf("section %s is not in the report", s)
		}
	}
	for _, s := range deterministic {
		if st := status[s]; st != schema.StatusPass && !(st == schema.StatusSkip && os.Geteuid() != 0) {
			t.Errorf("section %s: %s, want pass on fakegpu", s, st)
		}
	}
	failuresFirst(t, r.Checks)
	rows := map[string]schema.Verdict{}
	for _, c := range r.Checks {
		if c.Section == "fidelity" {
			rows[c.Check] = c.Verdict
		}
	}
	for _, n := range identityRows {
		if rows[n] != schema.Pass {
			t.Errorf("fidelity row %q: %q, want pass (the card is fakegpu with the same profile)", n, rows[n])
		}
	}
	page := readPage(t, dir)
	inOrder(t, page, "# GPU check: ", "## Failures", "## Compared with an earlier run", "## Sections", "## Fidelity", "## Plots", "## Every check")
	for _, s := range sections {
		if !strings.Contains(page, "\n### "+s+"\n") {
			t.Errorf("report.md has no table of section %s", s)
		}
	}
	plots := map[string]bool{}
	for _, p := range r.Plots {
		if p.Error != "" {
			t.Errorf("plot %s not drawn: %s", p.ID, p.Error)
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, p.File))
		if err != nil || !strings.Contains(string(b), "<svg") {
			t.Errorf("plot %s: %s is not an SVG (%v)", p.ID, p.File, err)
		}
		plots[p.ID] = true
	}
	for _, id := range []string{"judge-env", "compute-uniform"} {
		if !plots[id] {
			t.Errorf("no plot %s (plots: %v)", id, plots)
		}
	}
	for _, f := range []string{"run.json", "sections.jsonl", "logs/build.log", "records/memory.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the run folder has no %s: %v", f, err)
		}
	}
	if t.Failed() {
		for _, c := range r.Checks {
			if c.Verdict == schema.Fail {
				t.Logf("failed: %s: %s %s", c.ID(), c.Got, c.Note)
			}
		}
		t.Logf("the run's output:\n%s", tail(out, 40))
	}
}

func checkInjected(t *testing.T, dir string, r *schema.Report) {
	t.Helper()
	if len(r.Checks) == 0 || r.Checks[0].ID() != injected || r.Checks[0].Verdict != schema.Fail ||
		!strings.Contains(r.Checks[0].Note, "injected") {
		t.Fatalf("report.json's first check: %+v, want the injected failure of %s", r.Checks[0], injected)
	}
	if r.Verdict != "fail" {
		t.Errorf("verdict %q with a failed check, want fail", r.Verdict)
	}
	page := readPage(t, dir)
	i := strings.Index(page, "## Failures")
	rows := strings.Split(page[i:], "\n")
	if len(rows) < 5 || !strings.HasPrefix(rows[4], "| memory | env symbols 4096 |") {
		t.Errorf("report.md's first failure row: %q, want the injected check", rows[min(4, len(rows)-1)])
	}
	if r.Comparison == nil || len(r.Comparison.Regressions) != 1 || r.Comparison.Regressions[0].Check != "env symbols 4096" {
		t.Errorf("comparison with the passing run: %+v, want one regression, the injected check", r.Comparison)
	}
	if !strings.Contains(page, "| **regression** | now failing | memory | env symbols 4096 |") {
		t.Errorf("report.md does not show the regression:\n%s", page)
	}
}

// failuresFirst: no failed check after one that did not fail.
func failuresFirst(t *testing.T, checks []schema.Check) {
	t.Helper()
	seenOther := false
	for _, c := range checks {
		if c.Verdict != schema.Fail {
			seenOther = true
		} else if seenOther {
			t.Errorf("failed check %s comes after checks that did not fail", c.ID())
		}
	}
}

func readPage(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// inOrder: every part appears in the page, in this order.
func inOrder(t *testing.T, page string, parts ...string) {
	t.Helper()
	at := 0
	for _, p := range parts {
		i := strings.Index(page[at:], p)
		if i < 0 {
			t.Errorf("report.md: %q missing or out of order", p)
			continue
		}
		at += i + len(p)
	}
}
