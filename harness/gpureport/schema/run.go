package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// RunSchema names run.json's format.
const RunSchema = "limitbed-gpu-run/1"

// Run is run.json: what ran where, written once by the entry before the first section.
type Run struct {
	Schema   string    `json:"schema"`
	Started  time.Time `json:"started"`
	Host     string    `json:"host"`
	Command  string    `json:"command"`  // the entry's command line
	Sections []string  `json:"sections"` // the sections asked for, in order
	Bundle   string    `json:"bundle"`   // the bundle's VERSION line (commit, build date)
	Card     Card      `json:"card"`
	Notes    []string  `json:"notes,omitempty"` // what the run could not do everywhere ("not root: …")
}

// Card is the GPU the run measured (its first GPU), as the project's probe reads it through the
// driver (gpuprobe card), with the toolkit's version and the fakegpu profile that models it.
type Card struct {
	Name        string  `json:"name"`
	UUID        string  `json:"uuid,omitempty"`
	GPUs        int     `json:"gpus,omitempty"`
	MemoryMiB   float64 `json:"memory_mib,omitempty"`
	Driver      string  `json:"driver_version,omitempty"`
	CUDA        string  `json:"cuda_version,omitempty"` // the driver's CUDA version
	Toolkit     string  `json:"toolkit,omitempty"`      // nvcc's release, "" without one
	SMs         int     `json:"sm_count,omitempty"`
	CC          string  `json:"compute_capability,omitempty"`
	ClockSM     int     `json:"clock_sm_mhz,omitempty"`     // at the probe, idle
	ClockSMMax  int     `json:"clock_sm_max_mhz,omitempty"` // 0 where the driver does not say
	ClockMem    int     `json:"clock_mem_mhz,omitempty"`
	Profile     string  `json:"profile,omitempty"` // the fakegpu profile of this card ("" when none)
	FakeGPU     bool    `json:"fakegpu,omitempty"` // the "card" was fakegpu (the tier's self-test)
	ProbeErrors string  `json:"probe_errors,omitempty"`
	PowerLimitW float64 `json:"power_limit_w,omitempty"`
}

// ReadCard reads the probe's card line (unknown fields are ignored: the probe may say more).
func ReadCard(b []byte, what string) (Card, error) {
	var c Card
	if err := json.Unmarshal(bytes.TrimSpace(b), &c); err != nil {
		return c, fmt.Errorf("%s: not the probe's card line: %w", what, err)
	}
	if strings.TrimSpace(c.Name) == "" {
		return c, fmt.Errorf("%s: the card has no name (the probe could not read the GPU: %s)", what, c.ProbeErrors)
	}
	return c, nil
}

// ReadRun reads run.json.
func ReadRun(b []byte, what string) (Run, error) {
	var r Run
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("%s: %w", what, err)
	}
	if r.Schema != RunSchema {
		return r, fmt.Errorf("%s: schema %q, want %q (written by another version of the bundle)", what, r.Schema, RunSchema)
	}
	return r, nil
}

// Section statuses: what a section came to (the report decides it from the exit status and the
// records: a section that exited 0 with a failed check failed).
const (
	StatusPass    = "pass"
	StatusFail    = "fail"
	StatusSkip    = "skip"
	StatusError   = "error"   // the section itself broke: an exit status other than 0, 1 and 77
	StatusTimeout = "timeout" // stopped at its time limit
)

// SectionRun is one line of sections.jsonl: a section's exit status and duration, as the entry
// saw them; the report adds the status and the counts of its checks.
type SectionRun struct {
	Name    string    `json:"name"`
	Exit    int       `json:"exit"`
	Seconds float64   `json:"seconds"`
	Ended   time.Time `json:"ended"`
	Log     string    `json:"log,omitempty"` // relative to the run directory
	Status  string    `json:"status,omitempty"`
	Note    string    `json:"note,omitempty"`
	Counts  *Counts   `json:"counts,omitempty"`
}

// ReadSections reads sections.jsonl.
func ReadSections(r io.Reader, what string) ([]SectionRun, error) {
	var out []SectionRun
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	for n := 1; ; n++ {
		var s SectionRun
		err := dec.Decode(&s)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("%s record %d: %w", what, n, err)
		}
		if err := name("section", s.Name); err != nil {
			return out, fmt.Errorf("%s record %d: %w", what, n, err)
		}
		out = append(out, s)
	}
}

// Counts are a set of checks by verdict.
type Counts struct {
	Pass int `json:"pass"`
	Fail int `json:"fail"`
	Skip int `json:"skip"`
	Info int `json:"info"`
}

// Add counts one verdict.
func (c *Counts) Add(v Verdict) {
	switch v {
	case Pass:
		c.Pass++
	case Fail:
		c.Fail++
	case Skip:
		c.Skip++
	default:
		c.Info++
	}
}

// Total is every check counted.
func (c Counts) Total() int { return c.Pass + c.Fail + c.Skip + c.Info }
