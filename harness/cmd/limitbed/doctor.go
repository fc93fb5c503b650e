package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/harness/tiers"
	"github.com/limitbed/limitbed/plugin/doctor"
)

// runDoctor with no flags probes every tier of this machine and prints one line each (exit 0: a
// machine without a GPU is not an error). With --namespace/--pod or --node it is limitbed-doctor
// (plugin/doctor's CLI, the operator's own binary): the troubleshooting checklist against a live
// cluster, exit 1 when a check failed.
func runDoctor(ctx context.Context, env *cliEnv, args []string) error {
	cli := &doctor.CLI{
		Name: "limitbed doctor", Stdout: env.stdout, Stderr: env.stderr, Logger: env.logger,
		Connect:       doctor.APIConnect,
		NoTarget:      func(ctx context.Context) error { return probeTiers(ctx, env) },
		NoTargetUsage: "which test tiers this machine can run",
	}
	err := cli.Run(ctx, args)
	var ee *doctor.ExitError
	if errors.As(err, &ee) {
		return &exitError{ee.Code, ee.Err}
	}
	return err
}

// probeTiers prints one line per test tier: yes with what was found, or no with the reason and the fix.
func probeTiers(ctx context.Context, env *cliEnv) error {
	root, err := sandbox.RepoRoot()
	if err != nil {
		return &exitError{2, err}
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, r := range tiers.Probe(ctx, env.logger, root) {
		if r.OK {
			fmt.Fprintf(env.stdout, "%-8s yes: %s\n", r.Tier, r.Detail)
			continue
		}
		fmt.Fprintf(env.stdout, "%-8s no: %s\n%-8s   fix: %s\n", r.Tier, r.Detail, "", r.Fix)
	}
	return nil
}
