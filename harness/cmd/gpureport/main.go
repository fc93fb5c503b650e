// Command gpureport is `limitbed gpu` alone: the GPU tier's records and report (begin, record,
// section, report, compare; docs/gpu-report.md). The bundle's sections call it for every check: a
// small binary that starts at once, where limitbed carries the whole harness.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/limitbed/limitbed/harness/gpureport/cli"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	env := &cli.Env{Stdout: stdout, Stderr: stderr, Logger: slog.New(slog.NewTextHandler(stderr, nil))}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stderr, "usage: gpureport COMMAND [flags]\n\n%s\n", cli.Usage)
		return 2
	}
	err := cli.Run(ctx, env, args)
	if err != nil {
		fmt.Fprintf(stderr, "gpureport %s: %v\n", args[0], err)
	}
	return cli.Code(err)
}
