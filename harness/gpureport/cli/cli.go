// Package cli is the GPU tier's command line, `limitbed gpu` and the bundle's lean `gpureport`:
// begin, record and section write a run directory (the bundle's entry and sections call them),
// report makes its page, JSON and plots, compare says what changed between two reports
// (docs/gpu-report.md).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/limitbed/limitbed/harness/gpureport/compare"
	"github.com/limitbed/limitbed/harness/gpureport/report"
	"github.com/limitbed/limitbed/harness/gpureport/schema"
)

// Env is what a command gets instead of globals.
type Env struct {
	Stdout, Stderr io.Writer
	Logger         *slog.Logger
}

// ExitError carries the exit status: 1 a failed check or a regression, 2 a usage error or an input
// that cannot be read.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Code is the exit status of a command's error: 0 for none, the ExitError's, else 1.
func Code(err error) int {
	var ee *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.Code
	}
	return 1
}

// Usage is the commands, one a line.
const Usage = `begin    --run DIR --card FILE --sections "A B" ...   write run.json before the first section
record   --run DIR --section S --check C --verdict V ... append a check to records/S.jsonl
section  --run DIR --name S --exit N --seconds T         append a section's end to sections.jsonl
report   [--previous LAST.json] RUNDIR                   write report.md, report.json and plots/
compare  [--json] LAST.json NEW.json                     what changed; exit 1 on a regression`

// Run runs one command: args[0] is begin, record, section, report or compare.
func Run(_ context.Context, env *Env, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "begin":
			return runGPUBegin(env, args[1:])
		case "record":
			return runGPURecord(env, args[1:])
		case "section":
			return runGPUSection(env, args[1:])
		case "report":
			return runGPUReport(env, args[1:])
		case "compare":
			return runGPUCompare(env, args[1:])
		}
	}
	return &ExitError{2, fmt.Errorf("usage: limitbed gpu begin|record|section|report|compare [flags] (run with -h for the flags; docs/gpu-report.md)")}
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, " ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// parseArgs parses flags that take no positional arguments: help after -h (exit 0), an exit-2
// error for a bad flag or an argument.
func parseArgs(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, &ExitError{2, err}
	}
	if fs.NArg() > 0 {
		return false, &ExitError{2, fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	return false, nil
}

// runGPUBegin writes run.json, the run's header, before the first section.
func runGPUBegin(env *Env, args []string) error {
	fs := flag.NewFlagSet("gpu begin", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	run := fs.String("run", "", "the run directory (created) (required)")
	cardFile := fs.String("card", "", "the probe's card line (gpuprobe card > FILE) (required)")
	sections := fs.String("sections", "", "the sections asked for, space-separated, in order (required)")
	bundle := fs.String("bundle", "", "the bundle's version line")
	command := fs.String("command", "", "the entry's command line")
	toolkit := fs.String("toolkit", "", "the CUDA toolkit's release (nvcc), empty without one")
	profile := fs.String("profile", "", "the fakegpu profile of this card, empty when none")
	fake := fs.Bool("fakegpu", false, "the card is fakegpu (the tier's self-test)")
	var notes stringList
	fs.Var(&notes, "note", "a line the page shows under the card (repeat)")
	if help, err := parseArgs(fs, args); help || err != nil {
		return err
	}
	if *run == "" || *cardFile == "" || strings.TrimSpace(*sections) == "" {
		return &ExitError{2, fmt.Errorf("--run, --card and --sections are required")}
	}
	b, err := os.ReadFile(*cardFile)
	if err != nil {
		return &ExitError{2, fmt.Errorf("--card: %w", err)}
	}
	card, err := schema.ReadCard(b, *cardFile)
	if err != nil {
		return &ExitError{2, err}
	}
	card.Toolkit, card.Profile, card.FakeGPU = *toolkit, *profile, *fake
	host, _ := os.Hostname()
	r := schema.Run{Schema: schema.RunSchema, Started: time.Now().UTC().Round(time.Second), Host: host, Command: *command,
		Sections: strings.Fields(*sections), Bundle: *bundle, Card: card, Notes: notes}
	if err := os.MkdirAll(filepath.Join(*run, report.RecordsDir), 0o755); err != nil {
		return err
	}
	return writeJSON(filepath.Join(*run, report.RunFile), r)
}

// runGPUSection appends a section's exit status and duration to sections.jsonl.
func runGPUSection(env *Env, args []string) error {
	fs := flag.NewFlagSet("gpu section", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	run := fs.String("run", "", "the run directory (required)")
	name := fs.String("name", "", "the section (required)")
	exit := fs.Int("exit", 0, "its exit status: 0 passed, 1 a check failed, 77 skipped, 124/137 timed out, else broke")
	secs := fs.Float64("seconds", 0, "how long it ran")
	log := fs.String("log", "", "its log, relative to the run directory")
	note := fs.String("note", "", "what to say of it")
	if help, err := parseArgs(fs, args); help || err != nil {
		return err
	}
	if *run == "" || *name == "" {
		return &ExitError{2, fmt.Errorf("--run and --name are required")}
	}
	s := schema.SectionRun{Name: *name, Exit: *exit, Seconds: *secs, Ended: time.Now().UTC().Round(time.Second), Log: *log, Note: *note}
	return appendJSONLine(filepath.Join(*run, report.SectionsFile), s)
}

// runGPUReport writes report.json, report.md and plots/ of a run directory.
func runGPUReport(env *Env, args []string) error {
	fs := flag.NewFlagSet("gpu report", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	prev := fs.String("previous", "", "an earlier report.json: the page says what changed since")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &ExitError{2, err}
	}
	if fs.NArg() != 1 {
		return &ExitError{2, fmt.Errorf("usage: limitbed gpu report [--previous LAST.json] RUNDIR")}
	}
	r, err := report.Make(fs.Arg(0), report.Options{Previous: *prev, Logger: env.Logger})
	if err != nil {
		return &ExitError{2, err}
	}
	fmt.Fprintf(env.Stdout, "gpu report: %s: %s, %d checks: %d passed, %d failed, %d skipped, %d figures; %d plots\n",
		filepath.Join(fs.Arg(0), report.PageFile), strings.ToUpper(r.Verdict), r.Counts.Total(), r.Counts.Pass, r.Counts.Fail,
		r.Counts.Skip, r.Counts.Info, len(r.Plots))
	return nil
}

// runGPUCompare prints what changed between two reports; exit 1 on a regression.
func runGPUCompare(env *Env, args []string) error {
	fs := flag.NewFlagSet("gpu compare", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	asJSON := fs.Bool("json", false, "print the comparison as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &ExitError{2, err}
	}
	if fs.NArg() != 2 {
		return &ExitError{2, fmt.Errorf("usage: limitbed gpu compare [--json] LAST.json NEW.json")}
	}
	var reps [2]*schema.Report
	for i, p := range fs.Args() {
		b, err := os.ReadFile(p)
		if err != nil {
			return &ExitError{2, err}
		}
		if reps[i], err = schema.ReadReport(b, p); err != nil {
			return &ExitError{2, err}
		}
	}
	c := compare.Reports(reps[0], fs.Arg(0), reps[1])
	if *asJSON {
		if err := printJSON(env.Stdout, c); err != nil {
			return err
		}
	} else {
		compare.Text(env.Stdout, c)
	}
	if len(c.Regressions) > 0 {
		return &ExitError{1, fmt.Errorf("%d regression(s) since %s", len(c.Regressions), fs.Arg(0))}
	}
	return nil
}
