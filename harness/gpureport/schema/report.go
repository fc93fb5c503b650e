package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// ReportSchema names report.json's format (docs/gpu-report.md); a reader refuses another.
const ReportSchema = "limitbed-gpu-report/1"

// Report is report.json: the page's content, machine-readable.
type Report struct {
	Schema     string       `json:"schema"`
	Verdict    string       `json:"verdict"` // pass: no check failed and no section broke; else fail
	Run        Run          `json:"run"`
	Finished   time.Time    `json:"finished"` // the last section's end
	Counts     Counts       `json:"counts"`
	Sections   []SectionRun `json:"sections"`
	Checks     []Check      `json:"checks"` // failures first, then skips, passes and figures; else in run order
	Plots      []Plot       `json:"plots"`
	Comparison *Comparison  `json:"comparison,omitempty"`
}

// Plot is one drawn series.
type Plot struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	File   string `json:"file"`   // the image, relative to the run directory
	Series string `json:"series"` // its data, relative to the run directory
	Error  string `json:"error,omitempty"`
}

// Comparison is what changed since an earlier report (limitbed gpu compare).
type Comparison struct {
	Last        RunRef   `json:"last"`
	Regressions []Change `json:"regressions"`
	Changes     []Change `json:"changes"` // beyond noise, but no regression: better, moved, fixed, new, missing
	Note        string   `json:"note,omitempty"`
}

// RunRef names a report compared with.
type RunRef struct {
	File    string    `json:"file"`
	Started time.Time `json:"started"`
	Card    string    `json:"card"`
	Bundle  string    `json:"bundle"`
	Verdict string    `json:"verdict"`
}

// Change kinds.
const (
	ChangeNowFailing = "now failing" // a check that did not fail before fails now (a regression)
	ChangeWorse      = "worse"       // a figure moved beyond its noise in its Worse direction (a regression)
	ChangeBetter     = "better"      // the other way
	ChangeMoved      = "moved"       // beyond its noise, no direction is worse
	ChangeFixed      = "fixed"       // failed before, passes now
	ChangeSkipped    = "now skipped" // passed before, cannot run now
	ChangeMissing    = "missing"     // in the earlier report, not in this one
	ChangeNew        = "new"         // in this report only
)

// Change is one check's difference between two reports.
type Change struct {
	Kind        string   `json:"kind"`
	Section     string   `json:"section"`
	Check       string   `json:"check"`
	LastVerdict Verdict  `json:"last_verdict,omitempty"`
	NewVerdict  Verdict  `json:"new_verdict,omitempty"`
	Last        *float64 `json:"last,omitempty"`
	New         *float64 `json:"new,omitempty"`
	Unit        string   `json:"unit,omitempty"`
	Detail      string   `json:"detail"`
}

// ReadReport reads report.json and checks its schema and records.
func ReadReport(b []byte, what string) (*Report, error) {
	var r Report
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: not a GPU report: %w", what, err)
	}
	if r.Schema != ReportSchema {
		return nil, fmt.Errorf("%s: schema %q, want %q (written by another version of limitbed: compare reports of one schema)", what, r.Schema, ReportSchema)
	}
	if r.Verdict != "pass" && r.Verdict != "fail" {
		return nil, fmt.Errorf("%s: verdict %q: want pass or fail", what, r.Verdict)
	}
	for i := range r.Checks {
		if err := r.Checks[i].Validate(); err != nil {
			return nil, fmt.Errorf("%s: check %d (%s): %w", what, i+1, r.Checks[i].ID(), err)
		}
	}
	return &r, nil
}
