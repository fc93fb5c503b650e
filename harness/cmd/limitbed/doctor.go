package main

import (
	"context"
	"fmt"
	"time"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/harness/tiers"
)

// runDoctor probes every tier and prints one line each: yes with what was found, or no with the
// reason and the fix. It exits 0: a machine without a GPU is not an error.
func runDoctor(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) != 0 {
		return &exitError{2, fmt.Errorf("usage: limitbed doctor (no arguments; it probes this machine's tiers)")}
	}
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
