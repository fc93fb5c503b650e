package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// WorkloadImage is the image scripts/workload-image.sh builds: a Debian bookworm rootfs with
// bash, su, sudo, login, sshd, cron and the user "tenant"; no GPU software (that is bind-mounted).
const WorkloadImage = "limitbed/workload:dev"

var (
	imageMu    sync.Mutex
	imageBuilt bool
)

// EnsureWorkloadImage builds WorkloadImage unless it is up to date, by running
// scripts/workload-image.sh (which caches the rootfs and serialises concurrent runs, from several
// test processes too, with a lock file). A warm run takes well under a second; a cold one a couple
// of minutes (debootstrap). The script's output is returned in the error when it fails.
func EnsureWorkloadImage(ctx context.Context) error {
	imageMu.Lock()
	defer imageMu.Unlock()
	if imageBuilt {
		return nil
	}
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	script := filepath.Join(root, "scripts", "workload-image.sh")
	cmd := exec.CommandContext(ctx, script)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build workload image (%s): %w\n%s", script, err, out.String())
	}
	imageBuilt = true
	return nil
}

// RepoRoot finds the repository root: $LIMITBED_ROOT, else the nearest parent of the working
// directory holding scripts/workload-image.sh, else the root this source file was compiled from.
func RepoRoot() (string, error) {
	if r := os.Getenv("LIMITBED_ROOT"); r != "" {
		return r, nil
	}
	has := func(dir string) bool {
		_, err := os.Stat(filepath.Join(dir, "scripts", "workload-image.sh"))
		return err == nil
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			if has(dir) {
				return dir, nil
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		if dir := filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..")); has(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("repository root not found: set LIMITBED_ROOT")
}
