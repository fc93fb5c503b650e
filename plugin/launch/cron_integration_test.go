//go:build !nointegration

package launch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/harness/sandbox/sandboxtest"
)

// TestIntegrationCronLoadsAnEntryItsScanMissed puts the cron entry where cron's one-second mtime
// check cannot see it, as an entry written in the second of cron's scan is: after installing it,
// the entry's and /etc/cron.d's mtimes are set back to what they were before. With its poke the
// method still gets the job run at the next minute boundary; without it (the control) cron never
// loads the entry.
func TestIntegrationCronLoadsAnEntryItsScanMissed(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	t.Parallel()
	b := sandboxtest.Docker(t)
	for _, tc := range []struct {
		name   string
		poke   bool
		within time.Duration
	}{
		{"with poke", true, 90 * time.Second},
		{"control without poke", false, 75 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := sandboxtest.Start(t, b, sandbox.ContainerSpec{})
			m, err := Lookup("cron")
			if err != nil {
				t.Fatal(err)
			}
			// cron loads its tables when it starts: an entry written before that is simply read.
			// Wait until the daemon has run for 2 s, so that the hidden entry comes after its load.
			wait := `i=0; until pidof cron >/dev/null; do i=$((i+1)); [ $i -lt 100 ] || exit 1; sleep 0.1; done; sleep 2`
			if res, err := c.Exec(context.Background(), []string{"sh", "-c", wait}, sandbox.ExecOptions{}); err != nil || res.ExitCode != 0 {
				t.Fatalf("cron daemon did not start within 10 s: %v %s", err, res.Stderr)
			}
			m.argv = hiddenFromScan(m.argv)
			if !tc.poke {
				m.poke = nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.within)
			defer cancel()
			res, err := Run(ctx, c, m, "exit 3")
			switch {
			case tc.poke && err != nil:
				t.Fatalf("the poked entry did not run: %v", err)
			case tc.poke && res.ExitCode != 3:
				t.Fatalf("exit %d, want 3", res.ExitCode)
			case !tc.poke && !errors.Is(err, context.DeadlineExceeded):
				t.Fatalf("control: err = %v (exit %d), want the job never to run: the hidden entry no longer "+
					"reproduces cron's missed scan, so this test cannot show that the poke is needed", err, res.ExitCode)
			}
		})
	}
}

// hiddenFromScan wraps a cron install so that the entry's and /etc/cron.d's mtimes end where they
// were before the install.
func hiddenFromScan(install func(job, dir string) []string) func(job, dir string) []string {
	return func(job, dir string) []string {
		script := `old=$(stat -c %Y /etc/cron.d) && "$@" && touch -d "@$old" "$entry" /etc/cron.d`
		return append([]string{"env", "entry=" + cronFile(dir), "sh", "-c", script, "hidden-install"}, install(job, dir)...)
	}
}
