package report

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/gpureport/schema"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runDir is a run of four sections: memory passed, compute failed one check, torch skipped,
// judge broke (exit 3), fidelity never ended; plus a broken records file and a series.
func runDir(t *testing.T) string {
	dir := t.TempDir()
	run := schema.Run{Schema: schema.RunSchema, Started: time.Date(2026, 12, 3, 3, 17, 0, 0, time.UTC), Host: "gpu1",
		Command: "./gpu-check", Sections: []string{"memory", "compute", "torch", "judge", "fidelity"}, Bundle: "limitbed abc",
		Card: schema.Card{Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, SMs: 132, Profile: "h100-80g"}}
	b, _ := json.Marshal(run)
	write(t, filepath.Join(dir, RunFile), string(b))
	end := `"ended":"2026-12-03T03:20:00Z"`
	write(t, filepath.Join(dir, SectionsFile), `{"name":"memory","exit":0,"seconds":30,`+end+`,"log":"logs/memory.log"}
{"name":"compute","exit":1,"seconds":200,`+end+`}
{"name":"torch","exit":77,"seconds":1,`+end+`}
{"name":"judge","exit":3,"seconds":5,`+end+`}
`)
	write(t, filepath.Join(dir, RecordsDir, "memory.jsonl"), `{"section":"memory","check":"env 4096","verdict":"pass","want":"refused"}
{"section":"memory","check":"env 4096","verdict":"pass","want":"refused"}
`)
	write(t, filepath.Join(dir, RecordsDir, "compute.jsonl"), `{"section":"compute","check":"uniform force 30%","verdict":"pass","figure":0.30,"lo":0.28,"hi":0.32}
{"section":"compute","check":"mix force 30%","verdict":"fail","figure":0.35,"lo":0.28,"hi":0.32,"unit":"of unlimited"}
`)
	write(t, filepath.Join(dir, RecordsDir, "torch.jsonl"), `{"section":"torch","check":"section","verdict":"skip","note":"no torch"}`+"\n")
	write(t, filepath.Join(dir, RecordsDir, "judge.jsonl"), `{"section":"judge","check":"paths","verdict":"pass"}`+"\nPASS judge oops\n")
	write(t, filepath.Join(dir, SeriesDir, "compute-uniform.csv"), "# title: compute: uniform\n# x: s\n# y: share\n# ref limit 30 %: 0.3\nx,line,y\n1,force 30 %,0.5\n2,force 30 %,0.31\n")
	write(t, filepath.Join(dir, SeriesDir, "broken.csv"), "x,line,y\n")
	return dir
}

func TestMake(t *testing.T) {
	dir := runDir(t)
	r, err := Make(dir, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != "fail" {
		t.Errorf("verdict %q, want fail", r.Verdict)
	}
	status := map[string]string{}
	for _, s := range r.Sections {
		status[s.Name] = s.Status
	}
	for name, want := range map[string]string{"memory": schema.StatusPass, "compute": schema.StatusFail, "torch": schema.StatusSkip,
		"judge": schema.StatusError, "fidelity": schema.StatusError} {
		if status[name] != want {
			t.Errorf("section %s: %q, want %q", name, status[name], want)
		}
	}
	// Failures first, in the sections' order: compute's check, judge's broken file and exit, fidelity.
	var fails []string
	for i, c := range r.Checks {
		if c.Verdict == schema.Fail {
			if i != len(fails) {
				t.Errorf("failure %s at %d, after checks that passed", c.ID(), i)
			}
			fails = append(fails, c.ID())
		}
	}
	want := []string{"compute/mix force 30%", "judge/records readable", "judge/section ran", "fidelity/section ran"}
	if strings.Join(fails, ",") != strings.Join(want, ",") {
		t.Errorf("failures %v, want %v", fails, want)
	}
	ids := map[string]bool{}
	for _, c := range r.Checks {
		if ids[c.ID()] {
			t.Errorf("two checks named %s", c.ID())
		}
		ids[c.ID()] = true
	}
	if !ids["memory/env 4096 (2)"] {
		t.Errorf("the repeated check was not renamed: %v", ids)
	}
	page, _ := os.ReadFile(filepath.Join(dir, PageFile))
	p := string(page)
	for _, s := range []string{"# GPU check: FAIL — 4 of", "| compute | mix force 30% | 0.35 of unlimited | 0.28..0.32 of unlimited |",
		"| torch | section | no torch |", "![compute: uniform](plots/compute-uniform.svg)", "Not drawn: series/broken.csv",
		"Not compared: no earlier report"} {
		if !strings.Contains(p, s) {
			t.Errorf("report.md lacks %q:\n%s", s, p)
		}
	}
	if strings.Index(p, "## Failures") > strings.Index(p, "## Every check") {
		t.Error("failures are not first")
	}
	svg, err := os.ReadFile(filepath.Join(dir, PlotsDir, "compute-uniform.svg"))
	if err != nil || !strings.Contains(string(svg), "<svg") {
		t.Errorf("plot: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, JSONFile))
	back, err := schema.ReadReport(b, JSONFile)
	if err != nil || back.Counts != r.Counts {
		t.Errorf("report.json read back: %v (%+v, want %+v)", err, back.Counts, r.Counts)
	}
}

func TestMakeWithPrevious(t *testing.T) {
	first := runDir(t)
	if _, err := Make(first, Options{Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	second := runDir(t)
	write(t, filepath.Join(second, RecordsDir, "memory.jsonl"), `{"section":"memory","check":"env 4096","verdict":"fail","note":"injected"}`+"\n")
	r, err := Make(second, Options{Previous: filepath.Join(first, JSONFile), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if r.Comparison == nil || len(r.Comparison.Regressions) != 1 || r.Comparison.Regressions[0].Check != "env 4096" {
		t.Fatalf("comparison %+v", r.Comparison)
	}
	if r.Checks[0].ID() != "memory/env 4096" {
		t.Errorf("first check %s, want the new failure of the first section", r.Checks[0].ID())
	}
	page, _ := os.ReadFile(filepath.Join(second, PageFile))
	if !strings.Contains(string(page), "| **regression** | now failing | memory | env 4096 |") {
		t.Errorf("the page does not show the regression:\n%s", page)
	}
	if _, err := Make(second, Options{Previous: filepath.Join(first, "nothing.json"), Logger: quiet}); err == nil {
		t.Error("a missing earlier report was taken")
	}
}

func TestNotARunDirectory(t *testing.T) {
	_, err := Make(t.TempDir(), Options{Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "run.json") {
		t.Errorf("error %v, want one naming run.json", err)
	}
}
