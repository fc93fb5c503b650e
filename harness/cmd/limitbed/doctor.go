package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/limitbed/limitbed/harness/sandbox"
)

// runDoctor prints one line per tier: available or why not.
func runDoctor(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) != 0 {
		return &exitError{2, fmt.Errorf("usage: limitbed doctor")}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	say := func(what string, err error) {
		if err != nil {
			fmt.Fprintf(env.stdout, "%-8s no: %v\n", what, err)
			return
		}
		fmt.Fprintf(env.stdout, "%-8s yes\n", what)
	}
	say("docker", sandbox.NewDocker(env.logger).Available(ctx))
	say("host", sandbox.NewHost(env.logger, "").Available(ctx))
	say("kind", fmt.Errorf("the kind tier does not exist yet"))
	_, err := exec.LookPath("nvidia-smi")
	if err == nil {
		err = exec.CommandContext(ctx, "nvidia-smi", "-L").Run()
	}
	say("gpu", err)
	if root, rerr := sandbox.RepoRoot(); rerr == nil {
		_, err := os.Stat(filepath.Join(root, "build", "lib", "libvgpu.so"))
		say("c-build", err)
	}
	return nil
}
