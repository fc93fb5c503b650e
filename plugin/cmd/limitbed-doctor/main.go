// Command limitbed-doctor walks the troubleshooting checklist of a GPU pod or node against a live
// cluster, through its API server (plugin/doctor; docs/operator-guide.md, "Troubleshooting"):
//
//	limitbed-doctor --namespace N --pod P [--container C] [--gpu-tool PATH] [--json]
//	limitbed-doctor --node NODE [--json]
//
// Exit status: 0 every check passed or warned, 1 a check failed, 2 the doctor could not run. An
// operator runs it against a production cluster, so it links no test framework (plugin/cmd's
// TestProductionBinariesLinkNoTestDoubles holds that).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/limitbed/limitbed/plugin/doctor"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, doctor.APIConnect)
	stop()
	os.Exit(code)
}

// run is main without the process: the exit status of args.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, connect doctor.Connect) int {
	level := slog.LevelInfo
	if os.Getenv("LIMITBED_DEBUG") == "1" {
		level = slog.LevelDebug
	}
	cli := &doctor.CLI{
		Name: "limitbed-doctor", Stdout: stdout, Stderr: stderr, Connect: connect,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	err := cli.Run(ctx, args)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "limitbed-doctor: %v\n", err)
	var ee *doctor.ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return 1
}
