package node

import (
	"context"
	"fmt"
	"time"

	"github.com/limitbed/limitbed/harness/sandbox"
)

// readyScript succeeds once the daemons the container offers run: sshd listening on port 22 and
// cron (the workload image's entrypoint generates host keys first, which takes seconds on a busy
// machine).
const readyScript = `ok=0
[ "$1" = 0 ] || { [ -e /run/sshd.pid ] && ss -ltn 2>/dev/null | grep -q ':22 '; } || ok=1
[ "$2" = 0 ] || pgrep -x cron >/dev/null || ok=1
exit $ok`

// WaitReady waits up to timeout until the container's sshd and cron (where it offers them) are up,
// so that the first ssh or cron launch does not race the entrypoint.
func WaitReady(ctx context.Context, c sandbox.Container, timeout time.Duration) error {
	flag := func(f sandbox.Feature) string {
		if c.Supports(f) {
			return "1"
		}
		return "0"
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := []string{"sh", "-c", readyScript, "ready", flag(sandbox.FeatureSSH), flag(sandbox.FeatureCron)}
	for {
		res, err := c.Exec(ctx, cmd, sandbox.ExecOptions{})
		if err == nil && res.ExitCode == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("container not ready (sshd/cron) after %s: %w (last: %v %s)", timeout, ctx.Err(), err, res.Stderr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
