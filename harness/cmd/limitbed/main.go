// Command limitbed runs the harness outside `go test`:
//
//	limitbed matrix [flags]   the compatibility matrix (make matrix)
//	limitbed doctor [flags]   a GPU pod or node of a live cluster; no flags: what this machine can run
//	limitbed bench compute    the compute limit on fakegpu or a real GPU (make bench)
//	limitbed bench drivertruth  the node's driver-truth accounting against fakegpu or a real GPU
//	limitbed bench gate       the instructions libvgpu.so adds to a launch (make bench)
//	limitbed bench pod        a scheduled container's files, for processes on a real GPU
//	limitbed gpu report RUNDIR      the GPU tier's report of a run (report.md, report.json, plots)
//	limitbed gpu compare LAST NEW   what changed between two GPU reports; exit 1 on a regression
//	limitbed gpu begin|record|section  the GPU tier's records, written by the bundle's sections
//	limitbed e2e [flags]      the kind tier (make e2e)
//
// Only main exits; every subcommand returns an error and an exit code.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	tclog "github.com/testcontainers/testcontainers-go/log"
)

// exitError carries a specific exit code (1: mismatch, 2: usage or unavailable).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

type command struct {
	name, summary string
	run           func(ctx context.Context, env *cliEnv, args []string) error
}

// cliEnv is what subcommands get instead of globals.
type cliEnv struct {
	stdout, stderr io.Writer
	logger         *slog.Logger
}

var commands = []command{
	{"matrix", "run the compatibility matrix and compare it with testdata/matrix/expected.json", runMatrix},
	{"doctor", "check a GPU pod or node of a live cluster (--pod, --node); without flags, which tiers this machine can run", runDoctor},
	{"bench", "bench compute: the compute limit per workload and policy, achieved/unlimited per 1 s and 10 s window; bench drivertruth: the driver's per-process figures against the monitor's attribution; bench gate: a launch's added instructions; bench pod: a scheduled container's files", runBench},
	{"gpu", "the GPU tier's records and report: gpu report RUNDIR writes report.md, report.json and plots; gpu compare LAST.json NEW.json exits 1 on a regression; gpu begin|record|section are the bundle's (docs/gpu-report.md)", runGPU},
	{"e2e", "run the kind tier: a kind cluster with a real kubelet, the chart and the scenarios (make e2e)", runE2E},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	level := slog.LevelInfo
	if os.Getenv("LIMITBED_DEBUG") == "1" {
		level = slog.LevelDebug
	}
	env := &cliEnv{stdout: stdout, stderr: stderr,
		logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))}
	// testcontainers-go reports every container start through its own logger: keep it at debug.
	tclog.SetDefault(tcLogger{env.logger})
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		return 2
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, env, args[1:])
		if err == nil {
			return 0
		}
		fmt.Fprintf(stderr, "limitbed %s: %v\n", c.name, err)
		if ee, ok := err.(*exitError); ok {
			return ee.code
		}
		return 1
	}
	fmt.Fprintf(stderr, "limitbed: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: limitbed COMMAND [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nlimitbed COMMAND --help describes a command's flags.")
}

// tcLogger routes testcontainers-go's messages to the logger at debug level.
type tcLogger struct{ l *slog.Logger }

func (t tcLogger) Printf(format string, args ...any) {
	t.l.Debug(strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// parseArgs parses a subcommand's flags, which take no positional arguments: help is true after
// -h (the usage is printed, exit 0); a bad flag or an argument is an exit-2 error.
func parseArgs(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, &exitError{2, err}
	}
	if fs.NArg() > 0 {
		return false, &exitError{2, fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	return false, nil
}
