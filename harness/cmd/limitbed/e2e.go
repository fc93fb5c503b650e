package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/limitbed/limitbed/harness/sandbox"
)

// e2eUsage is what `limitbed e2e --help` prints; a test pins it to what the runner does.
const e2eUsage = `usage: limitbed e2e [--run REGEXP] [--keep] [--cluster NAME]

Runs the kind tier, the same runner as make e2e (scripts/e2e.sh): a kind cluster with a real
kubelet and containerd (the offline node image is built first when missing), the plugin and
workload images loaded, the Helm chart installed, the scheduler's annotations played by the
harness, then the scenarios over kubectl exec, ssh, su -, sudo and cron. The cluster is deleted
at the end unless --keep. Needs Docker and, to build the node image, root (docs/e2e.md).
`

// runE2E hands over to scripts/e2e.sh so that `make e2e` and `limitbed e2e` are one runner.
func runE2E(ctx context.Context, env *cliEnv, args []string) error {
	fs := flag.NewFlagSet("e2e", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() { fmt.Fprint(env.stderr, e2eUsage) }
	run := fs.String("run", "", "go test -run filter for the scenarios (E2E_RUN)")
	keep := fs.Bool("keep", false, "keep the cluster afterwards (LIMITBED_E2E_KEEP=1)")
	cluster := fs.String("cluster", "", "kind cluster name (LIMITBED_E2E_CLUSTER, default limitbed-e2e)")
	if help, err := parseArgs(fs, args); help || err != nil {
		return err
	}
	root, err := sandbox.RepoRoot()
	if err != nil {
		return &exitError{2, err}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "e2e.sh"))
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = env.stdout, env.stderr
	cmd.Env = os.Environ()
	if *run != "" {
		cmd.Env = append(cmd.Env, "E2E_RUN="+*run)
	}
	if *keep {
		cmd.Env = append(cmd.Env, "LIMITBED_E2E_KEEP=1")
	}
	if *cluster != "" {
		cmd.Env = append(cmd.Env, "LIMITBED_E2E_CLUSTER="+*cluster)
	}
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &exitError{ee.ExitCode(), fmt.Errorf("scripts/e2e.sh failed (exit %d)", ee.ExitCode())}
	}
	if err != nil {
		return fmt.Errorf("run scripts/e2e.sh: %w", err)
	}
	return nil
}
