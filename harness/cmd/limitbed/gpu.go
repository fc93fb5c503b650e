package main

import (
	"context"

	"github.com/limitbed/limitbed/harness/gpureport/cli"
)

// runGPU: `limitbed gpu begin|record|section|report|compare`, the GPU tier's records and report
// (harness/gpureport/cli; the bundle's bin/gpureport is the same commands alone).
func runGPU(ctx context.Context, env *cliEnv, args []string) error {
	err := cli.Run(ctx, &cli.Env{Stdout: env.stdout, Stderr: env.stderr, Logger: env.logger}, args)
	if err != nil {
		return &exitError{cli.Code(err), err}
	}
	return nil
}
