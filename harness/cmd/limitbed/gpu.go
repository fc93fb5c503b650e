package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/limitbed/limitbed/harness/gpureport/compare"
	"github.com/limitbed/limitbed/harness/gpureport/report"
	"github.com/limitbed/limitbed/harness/gpureport/schema"
)

// runGPU: `limitbed gpu begin|record|section|report|compare`, the GPU tier's records and report
// (docs/gpu-report.md). The bundle's entry and sections call the first three; a person or the
// nightly job the last two.
func runGPU(_ context.Context, env *cliEnv, args []string) error {
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
	return &exitError{2, fmt.Errorf("usage: limitbed gpu begin|record|section|report|compare [flags] (run with -h for the flags; docs/gpu-report.md)")}
}

// runGPUBegin writes run.json, the run's header, before the first section.
func runGPUBegin(env *cliEnv, args []string) error {
	fs := flag.NewFlagSet("gpu begin", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
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
		return &exitError{2, fmt.Errorf("--run, --card and --sections are required")}
	}
	b, err := os.ReadFile(*cardFile)
	if err != nil {
		return &exitError{2, fmt.Errorf("--card: %w", err)}
	}
	card, err := schema.ReadCard(b, *cardFile)
	if err != nil {
		return &exitError{2, err}
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
func runGPUSection(env *cliEnv, args []string) error {
	fs := flag.NewFlagSet("gpu section", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
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
		return &exitError{2, fmt.Errorf("--run and --name are required")}
	}
	s := schema.SectionRun{Name: *name, Exit: *exit, Seconds: *secs, Ended: time.Now().UTC().Round(time.Second), Log: *log, Note: *note}
	return appendJSONLine(filepath.Join(*run, report.SectionsFile), s)
}

// runGPUReport writes report.json, report.md and plots/ of a run directory.
func runGPUReport(env *cliEnv, args []string) error {
	fs := flag.NewFlagSet("gpu report", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	prev := fs.String("previous", "", "an earlier report.json: the page says what changed since")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &exitError{2, err}
	}
	if fs.NArg() != 1 {
		return &exitError{2, fmt.Errorf("usage: limitbed gpu report [--previous LAST.json] RUNDIR")}
	}
	r, err := report.Make(fs.Arg(0), report.Options{Previous: *prev, Logger: env.logger})
	if err != nil {
		return &exitError{2, err}
	}
	fmt.Fprintf(env.stdout, "gpu report: %s: %s, %d checks: %d passed, %d failed, %d skipped, %d figures; %d plots\n",
		filepath.Join(fs.Arg(0), report.PageFile), strings.ToUpper(r.Verdict), r.Counts.Total(), r.Counts.Pass, r.Counts.Fail,
		r.Counts.Skip, r.Counts.Info, len(r.Plots))
	return nil
}

// runGPUCompare prints what changed between two reports; exit 1 on a regression.
func runGPUCompare(env *cliEnv, args []string) error {
	fs := flag.NewFlagSet("gpu compare", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	asJSON := fs.Bool("json", false, "print the comparison as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &exitError{2, err}
	}
	if fs.NArg() != 2 {
		return &exitError{2, fmt.Errorf("usage: limitbed gpu compare [--json] LAST.json NEW.json")}
	}
	var reps [2]*schema.Report
	for i, p := range fs.Args() {
		b, err := os.ReadFile(p)
		if err != nil {
			return &exitError{2, err}
		}
		if reps[i], err = schema.ReadReport(b, p); err != nil {
			return &exitError{2, err}
		}
	}
	c := compare.Reports(reps[0], fs.Arg(0), reps[1])
	if *asJSON {
		if err := printJSON(env.stdout, c); err != nil {
			return err
		}
	} else {
		compare.Text(env.stdout, c)
	}
	if len(c.Regressions) > 0 {
		return &exitError{1, fmt.Errorf("%d regressions since %s", len(c.Regressions), fs.Arg(0))}
	}
	return nil
}
