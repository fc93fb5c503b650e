// Package schema is the GPU tier's formats (docs/gpu-report.md): the records a section writes
// (one check a line, records/SECTION.jsonl), the series behind a plot (series/ID.csv), the run's
// header (run.json) and section statuses (sections.jsonl), and the report (report.json). It is
// their one reader and writer; every reader names the input and the line of a bad record.
package schema

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// Verdict is a check's outcome.
type Verdict string

// The verdicts: a check passed or failed against its bound or wanted answer, could not run here
// (skip, with why in Note), or is a figure without a bound (info).
const (
	Pass Verdict = "pass"
	Fail Verdict = "fail"
	Skip Verdict = "skip"
	Info Verdict = "info"
)

// Rank orders verdicts for the page: failures first, then skips, passes and plain figures.
func (v Verdict) Rank() int {
	switch v {
	case Fail:
		return 0
	case Skip:
		return 1
	case Pass:
		return 2
	}
	return 3
}

func (v Verdict) valid() bool { return v == Pass || v == Fail || v == Skip || v == Info }

// Check is one record: a check of a section with its figure, bound and verdict. Fidelity rows
// (section "fidelity") carry fakegpu's figure in Fake beside the card's in Figure, and the
// profile key (or fakegpu source) to fix in Key.
type Check struct {
	Section string   `json:"section"`
	Check   string   `json:"check"`
	Verdict Verdict  `json:"verdict"`
	Figure  *float64 `json:"figure,omitempty"`
	Unit    string   `json:"unit,omitempty"`
	Lo      *float64 `json:"lo,omitempty"`    // the bound: Figure must be ≥ Lo
	Hi      *float64 `json:"hi,omitempty"`    // and ≤ Hi
	Want    string   `json:"want,omitempty"`  // a wanted answer that is not a number ("refused")
	Got     string   `json:"got,omitempty"`   // what the check saw (an excerpt)
	Note    string   `json:"note,omitempty"`  // why (a skip's reason and fix, a failure's cause)
	Fake    *float64 `json:"fake,omitempty"`  // fidelity: fakegpu's figure for the same probe
	Key     string   `json:"key,omitempty"`   // fidelity: the profile key or fakegpu source to fix
	Noise   *float64 `json:"noise,omitempty"` // compare: changes of Figure within ± Noise are noise
	Worse   string   `json:"worse,omitempty"` // compare: "up" or "down", the direction of a regression
}

// Limits of a record's text fields: a check name is a line of a table, a note a sentence or two.
const (
	MaxName = 200
	MaxText = 2000
)

// Validate checks one record; the error says which field and what is wanted.
func (c *Check) Validate() error {
	if err := name("section", c.Section); err != nil {
		return err
	}
	if err := name("check", c.Check); err != nil {
		return err
	}
	if !c.Verdict.valid() {
		return fmt.Errorf("verdict %q: want pass, fail, skip or info", c.Verdict)
	}
	for _, f := range []struct {
		n string
		v *float64
	}{{"figure", c.Figure}, {"lo", c.Lo}, {"hi", c.Hi}, {"fake", c.Fake}, {"noise", c.Noise}} {
		if f.v != nil && (math.IsNaN(*f.v) || math.IsInf(*f.v, 0)) {
			return fmt.Errorf("%s: %v is not a finite number", f.n, *f.v)
		}
	}
	if c.Lo != nil && c.Hi != nil && *c.Lo > *c.Hi {
		return fmt.Errorf("bound %g..%g: lo above hi", *c.Lo, *c.Hi)
	}
	if c.Noise != nil && *c.Noise < 0 {
		return fmt.Errorf("noise %g: want 0 or more", *c.Noise)
	}
	if c.Worse != "" && c.Worse != "up" && c.Worse != "down" {
		return fmt.Errorf("worse %q: want up, down or nothing", c.Worse)
	}
	for _, f := range []struct{ n, v string }{{"unit", c.Unit}, {"want", c.Want}, {"got", c.Got}, {"note", c.Note}, {"key", c.Key}} {
		if len(f.v) > MaxText {
			return fmt.Errorf("%s: %d bytes, at most %d", f.n, len(f.v), MaxText)
		}
	}
	return nil
}

func name(field, v string) error {
	switch {
	case strings.TrimSpace(v) == "":
		return fmt.Errorf("%s: empty", field)
	case len(v) > MaxName:
		return fmt.Errorf("%s %.40q…: %d bytes, at most %d", field, v, len(v), MaxName)
	case strings.ContainsAny(v, "\n\r\t|"):
		return fmt.Errorf("%s %q: no newline, tab or | (it is a cell of the page's tables)", field, v)
	}
	return nil
}

// InBounds reports whether the figure lies within the bound (a missing side is open); false
// without a figure.
func (c *Check) InBounds() bool {
	if c.Figure == nil {
		return false
	}
	return (c.Lo == nil || *c.Figure >= *c.Lo) && (c.Hi == nil || *c.Figure <= *c.Hi)
}

// ID identifies a check within a run: its section and name.
func (c *Check) ID() string { return c.Section + "/" + c.Check }

// ReadChecks reads a records file (JSON lines; blank lines allowed). what names the input in
// errors ("records/memory.jsonl"); the first bad line is the error, with its number.
func ReadChecks(r io.Reader, what string) ([]Check, error) {
	var out []Check
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var c Check
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return out, fmt.Errorf("%s line %d: not a check record: %w (one JSON object a line: docs/gpu-report.md)", what, n, err)
		}
		if dec.More() {
			return out, fmt.Errorf("%s line %d: more than one JSON value on the line", what, n)
		}
		if err := c.Validate(); err != nil {
			return out, fmt.Errorf("%s line %d: %w", what, n, err)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return out, fmt.Errorf("%s: a line over 1 MiB: not a check record", what)
		}
		return out, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// Line is the record as one line of a records file (newline included).
func (c *Check) Line() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Float is a pointer to v, for the optional figures.
func Float(v float64) *float64 { return &v }
