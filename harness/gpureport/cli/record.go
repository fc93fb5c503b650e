package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/limitbed/limitbed/harness/gpureport/compare"
	"github.com/limitbed/limitbed/harness/gpureport/report"
	"github.com/limitbed/limitbed/harness/gpureport/schema"
)

// InjectFailEnv names a check ("section/check") whose record is written as failed: how the tier's
// self-test proves that a failure reaches the top of the page and makes compare exit non-zero.
const InjectFailEnv = "GPU_CHECK_INJECT_FAIL"

// optFloat is a number flag that may be left out or given empty (a measurement that gave none).
type optFloat struct {
	raw string
	set bool
}

func (o *optFloat) String() string { return o.raw }
func (o *optFloat) Set(v string) error {
	o.raw, o.set = strings.TrimSpace(v), strings.TrimSpace(v) != ""
	return nil
}

// value is the number, nil when not given; a bad number is an error naming the flag.
func (o *optFloat) value(flagName string) (*float64, error) {
	if !o.set {
		return nil, nil
	}
	x, err := strconv.ParseFloat(o.raw, 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return nil, fmt.Errorf("--%s %q is not a number", flagName, o.raw)
	}
	return &x, nil
}

type recordFlags struct {
	run, verdict, tolRel      string
	figure, lo, hi, fake, tol optFloat
	noise                     optFloat
	c                         schema.Check
}

// runGPURecord appends one check to RUN/records/SECTION.jsonl and prints it as a line of the log.
// A figure or bound that is not a number does not lose the check: it is written as failed, with
// why. --verdict auto judges the figure against the bound (or, with --fake, against fakegpu's
// figure ± the tolerance).
func runGPURecord(env *Env, args []string) error {
	f, err := parseRecordFlags(env, args)
	if err != nil || f == nil { // f nil: -h printed the flags
		return err
	}
	c := &f.c
	if err := name(c); err != nil {
		return &ExitError{2, err}
	}
	if problem := f.numbers(); problem != "" {
		c.Verdict, c.Note = schema.Fail, join(problem, c.Note)
	} else if f.verdict == "auto" {
		// A fidelity row (fakegpu's figure and a tolerance) with no fakegpu figure fails.
		c.Verdict, c.Note = judge(c, f.fake.set || f.tol.set || f.tolRel != "", c.Note)
	} else {
		c.Verdict = schema.Verdict(f.verdict)
	}
	if want := os.Getenv(InjectFailEnv); want != "" && want == c.ID() {
		c.Verdict, c.Note = schema.Fail, join("injected failure ("+InjectFailEnv+")", c.Note)
	}
	c.Got, c.Note = clip(c.Got, 600), clip(c.Note, schema.MaxText)
	line, err := c.Line()
	if err != nil {
		return &ExitError{2, fmt.Errorf("gpu record %s: %w", c.ID(), err)}
	}
	dir := filepath.Join(f.run, report.RecordsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fh, err := os.OpenFile(filepath.Join(dir, c.Section+".jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := fh.Write(line); err != nil { // one write: whole lines even beside another writer
		fh.Close()
		return err
	}
	if err := fh.Close(); err != nil {
		return err
	}
	printRecord(env.Stdout, c)
	return nil
}

func parseRecordFlags(env *Env, args []string) (*recordFlags, error) {
	f := &recordFlags{}
	fs := flag.NewFlagSet("gpu record", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.StringVar(&f.run, "run", "", "the run directory (required)")
	fs.StringVar(&f.c.Section, "section", "", "the section (required)")
	fs.StringVar(&f.c.Check, "check", "", "the check's name, unique in its section (required)")
	fs.StringVar(&f.verdict, "verdict", "auto", "pass, fail, skip, info, or auto: judge --figure against --lo/--hi (or --fake ± --tol)")
	fs.Var(&f.figure, "figure", "the measured figure (empty: none was measured)")
	fs.StringVar(&f.c.Unit, "unit", "", "the figure's unit")
	fs.Var(&f.lo, "lo", "the bound's low end")
	fs.Var(&f.hi, "hi", "the bound's high end")
	fs.Var(&f.fake, "fake", "fidelity: fakegpu's figure for the same probe; the bound is it ± --tol")
	fs.Var(&f.tol, "tol", "fidelity: the absolute tolerance around --fake")
	fs.StringVar(&f.tolRel, "tol-rel", "", "fidelity: the tolerance as a fraction of --fake (the larger of the two counts)")
	fs.StringVar(&f.c.Key, "key", "", "fidelity: the profile key or fakegpu source to fix when beyond the bound")
	fs.StringVar(&f.c.Want, "want", "", "a wanted answer that is not a number")
	fs.StringVar(&f.c.Got, "got", "", "what the check saw (clipped to 600 bytes)")
	fs.StringVar(&f.c.Note, "note", "", "why: a skip's reason and fix, a failure's cause")
	fs.Var(&f.noise, "noise", "compare: a change of the figure within ± this is noise")
	fs.StringVar(&f.c.Worse, "worse", "", "compare: up or down, the direction a regression moves the figure")
	if help, err := parseArgs(fs, args); help || err != nil {
		return nil, err
	}
	if f.run == "" {
		return nil, &ExitError{2, fmt.Errorf("--run is required")}
	}
	switch f.verdict {
	case "pass", "fail", "skip", "info", "auto":
	default:
		return nil, &ExitError{2, fmt.Errorf("--verdict %q: want pass, fail, skip, info or auto", f.verdict)}
	}
	return f, nil
}

func name(c *schema.Check) error {
	probe := *c
	probe.Verdict = schema.Info
	probe.Worse = ""
	if err := probe.Validate(); err != nil {
		return fmt.Errorf("gpu record: %w", err)
	}
	return nil
}

// numbers fills the record's numbers from the flags; a bad one is returned as the problem.
func (f *recordFlags) numbers() string {
	var problems []string
	for _, n := range []struct {
		flag string
		o    *optFloat
		dst  **float64
	}{{"figure", &f.figure, &f.c.Figure}, {"lo", &f.lo, &f.c.Lo}, {"hi", &f.hi, &f.c.Hi}, {"fake", &f.fake, &f.c.Fake}, {"noise", &f.noise, &f.c.Noise}} {
		v, err := n.o.value(n.flag)
		if err != nil {
			problems = append(problems, err.Error())
		}
		*n.dst = v
	}
	if f.fake.set && f.c.Fake != nil {
		tol, err := f.tol.value("tol")
		if err != nil {
			problems = append(problems, err.Error())
		}
		rel := 0.0
		if f.tolRel != "" {
			if rel, err = strconv.ParseFloat(f.tolRel, 64); err != nil || rel < 0 {
				problems = append(problems, fmt.Sprintf("--tol-rel %q is not a fraction", f.tolRel))
			}
		}
		t := rel * math.Abs(*f.c.Fake)
		if tol != nil {
			t = math.Max(t, *tol)
		}
		f.c.Lo, f.c.Hi = schema.Float(*f.c.Fake-t), schema.Float(*f.c.Fake+t)
	}
	if f.c.Lo != nil && f.c.Hi != nil && *f.c.Lo > *f.c.Hi {
		problems = append(problems, fmt.Sprintf("bound %g..%g: lo above hi", *f.c.Lo, *f.c.Hi))
		f.c.Lo, f.c.Hi = nil, nil
	}
	if f.c.Worse != "" && f.c.Worse != "up" && f.c.Worse != "down" {
		problems = append(problems, fmt.Sprintf("--worse %q: want up or down", f.c.Worse))
		f.c.Worse = ""
	}
	return strings.Join(problems, "; ")
}

// judge is auto's verdict and note.
func judge(c *schema.Check, fidelity bool, note string) (schema.Verdict, string) {
	switch {
	case fidelity && c.Fake == nil:
		return schema.Fail, join("fakegpu gave no figure", note)
	case c.Figure == nil:
		return schema.Fail, join("no figure was measured", note)
	case c.Lo == nil && c.Hi == nil:
		return schema.Info, note
	case c.InBounds():
		return schema.Pass, note
	}
	return schema.Fail, note
}

func join(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// printRecord writes the check as the log's line: VERDICT section check, figure, bound, detail.
func printRecord(w io.Writer, c *schema.Check) {
	var parts []string
	if c.Figure != nil {
		parts = append(parts, compare.Num(*c.Figure, c.Unit))
	}
	if b := compare.Bound(c); b != "" {
		parts = append(parts, "want "+b)
	}
	if c.Fake != nil {
		parts = append(parts, "fakegpu "+compare.Num(*c.Fake, c.Unit))
	}
	if c.Want != "" {
		parts = append(parts, "want "+c.Want)
	}
	if c.Got != "" {
		parts = append(parts, "got "+clip(c.Got, 200))
	}
	if c.Note != "" {
		parts = append(parts, c.Note)
	}
	fmt.Fprintf(w, "%-4s %-12s %-46s %s\n", strings.ToUpper(string(c.Verdict)), c.Section, c.Check, strings.Join(parts, "; "))
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func appendJSONLine(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := fh.Write(append(b, '\n')); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
