// Package report makes a GPU run's report from the run directory the sections wrote (run.json,
// sections.jsonl, records/*.jsonl, series/*.csv): report.json, the page report.md (failures
// first) and the plots (plots/*.svg). A record file or series that cannot be read does not stop
// the report: it becomes a failed check (or a plot's error) that names the file and the fault.
package report

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/limitbed/limitbed/harness/gpureport/schema"
)

// The run directory's layout (docs/gpu-report.md).
const (
	RunFile      = "run.json"
	SectionsFile = "sections.jsonl"
	RecordsDir   = "records"
	SeriesDir    = "series"
	PlotsDir     = "plots"
	LogsDir      = "logs"
	JSONFile     = "report.json"
	PageFile     = "report.md"
)

// Build reads the run directory into a report (nothing is written).
func Build(dir string, logger *slog.Logger) (*schema.Report, error) {
	b, err := os.ReadFile(filepath.Join(dir, RunFile))
	if err != nil {
		return nil, fmt.Errorf("run directory %s: %w (the entry writes it before the first section: is this a run directory of ./gpu-check?)", dir, err)
	}
	run, err := schema.ReadRun(b, filepath.Join(dir, RunFile))
	if err != nil {
		return nil, err
	}
	r := &schema.Report{Schema: schema.ReportSchema, Run: run, Checks: []schema.Check{}, Plots: []schema.Plot{}, Sections: []schema.SectionRun{}}
	secs, err := readSections(dir)
	if err != nil {
		return nil, err
	}
	checks := readRecords(dir, logger)
	r.Sections, checks = settle(run, secs, checks)
	r.Checks = order(run.Sections, dedupe(checks))
	for i := range r.Checks {
		r.Counts.Add(r.Checks[i].Verdict)
	}
	r.Verdict = "pass"
	if r.Counts.Fail > 0 {
		r.Verdict = "fail"
	}
	for _, s := range r.Sections {
		if s.Ended.After(r.Finished) {
			r.Finished = s.Ended
		}
		if s.Status == schema.StatusError || s.Status == schema.StatusTimeout {
			r.Verdict = "fail"
		}
	}
	return r, nil
}

func readSections(dir string) ([]schema.SectionRun, error) {
	p := filepath.Join(dir, SectionsFile)
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return schema.ReadSections(f, p)
}

// readRecords reads every records/*.jsonl, in name order; an unreadable file is a failed check.
func readRecords(dir string, logger *slog.Logger) []schema.Check {
	files, _ := filepath.Glob(filepath.Join(dir, RecordsDir, "*.jsonl"))
	sort.Strings(files)
	var out []schema.Check
	for _, p := range files {
		rel := filepath.Join(RecordsDir, filepath.Base(p))
		sec := strings.TrimSuffix(filepath.Base(p), ".jsonl")
		f, err := os.Open(p)
		if err == nil {
			var cs []schema.Check
			cs, err = schema.ReadChecks(f, rel)
			f.Close()
			out = append(out, cs...)
		}
		if err != nil {
			logger.Warn("a records file is broken: its good lines are kept, the fault is a failed check", "file", rel, "err", err)
			out = append(out, schema.Check{Section: safeName(sec), Check: "records readable", Verdict: schema.Fail,
				Note: truncate(err.Error(), schema.MaxText)})
		}
	}
	return out
}

// settle gives every section asked for, run or not, its status and counts, adding a record
// where a section left none or broke.
func settle(run schema.Run, secs []schema.SectionRun, checks []schema.Check) ([]schema.SectionRun, []schema.Check) {
	byName := map[string]*schema.SectionRun{}
	var out []schema.SectionRun
	for _, s := range secs {
		out = append(out, s)
	}
	for i := range out {
		byName[out[i].Name] = &out[i]
	}
	for _, n := range run.Sections {
		if byName[n] == nil {
			out = append(out, schema.SectionRun{Name: n, Exit: -1, Note: "did not run to its end: no exit status was recorded (the entry was stopped?)"})
			byName[n] = &out[len(out)-1]
		}
	}
	for i := range out {
		s := &out[i]
		var c schema.Counts
		for _, ch := range checks {
			if ch.Section == s.Name {
				c.Add(ch.Verdict)
			}
		}
		if extra := status(s, c); extra != nil {
			checks = append(checks, *extra)
			c.Add(extra.Verdict)
		}
		s.Counts = &c
	}
	return out, checks
}

// status decides a section's status from its exit and its checks; a section that broke, timed
// out or wrote nothing gets a record that says so.
func status(s *schema.SectionRun, c schema.Counts) *schema.Check {
	log := ""
	if s.Log != "" {
		log = " (log: " + s.Log + ")"
	}
	rec := func(v schema.Verdict, note string) *schema.Check {
		return &schema.Check{Section: s.Name, Check: "section ran", Verdict: v, Note: note + log}
	}
	switch {
	case s.Exit == 124 || s.Exit == 137:
		s.Status = schema.StatusTimeout
		note := fmt.Sprintf("stopped at its time limit after %.0f s (exit %d)", s.Seconds, s.Exit)
		if s.Note != "" {
			note = s.Note
		}
		return rec(schema.Fail, note)
	case s.Exit == 77:
		s.Status = schema.StatusSkip
		if c.Total() == 0 {
			return rec(schema.Skip, "skipped without a reason recorded")
		}
	case s.Exit != 0 && s.Exit != 1:
		s.Status = schema.StatusError
		note := fmt.Sprintf("exited %d", s.Exit)
		if s.Note != "" {
			note = s.Note
		}
		return rec(schema.Fail, note)
	case c.Total() == 0:
		s.Status = schema.StatusError
		return rec(schema.Fail, fmt.Sprintf("exited %d without writing a check", s.Exit))
	case s.Exit == 1 && c.Fail == 0:
		s.Status = schema.StatusError
		return rec(schema.Fail, "exited 1 without a failed check: it broke")
	case c.Fail > 0:
		s.Status = schema.StatusFail
	case c.Pass == 0 && c.Info == 0:
		s.Status = schema.StatusSkip
	default:
		s.Status = schema.StatusPass
	}
	return nil
}

// dedupe renames a check whose section and name were already used ("name (2)"), so that every
// check has its own identity in the report and in a comparison.
func dedupe(checks []schema.Check) []schema.Check {
	seen := map[string]int{}
	for i := range checks {
		id := checks[i].ID()
		seen[id]++
		if n := seen[id]; n > 1 {
			checks[i].Check = fmt.Sprintf("%s (%d)", checks[i].Check, n)
		}
	}
	return checks
}

// order sorts failures first, then skips, passes and plain figures; within a verdict by the
// sections' order in the run, then as written.
func order(sections []string, checks []schema.Check) []schema.Check {
	pos := map[string]int{}
	for i, s := range sections {
		pos[s] = i
	}
	rank := func(s string) int {
		if p, ok := pos[s]; ok {
			return p
		}
		return len(sections)
	}
	sort.SliceStable(checks, func(i, j int) bool {
		a, b := checks[i], checks[j]
		if a.Verdict.Rank() != b.Verdict.Rank() {
			return a.Verdict.Rank() < b.Verdict.Rank()
		}
		return rank(a.Section) < rank(b.Section)
	})
	return checks
}

func safeName(s string) string {
	if s == "" || len(s) > schema.MaxName || strings.ContainsAny(s, "\n\r\t|") {
		return "records"
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
