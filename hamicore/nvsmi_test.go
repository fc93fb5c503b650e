package hamicore_test

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/tier"
	"github.com/limitbed/limitbed/plugin/nvsmi"
)

// The operator's first check: Debian's real nvidia-smi, run under libvgpu.so with a 3000 MiB limit
// on fakegpu's 16384 MiB card, shows 3000 MiB as the total — in a session that has the device
// plugin's environment, and in a login session that has none (the library and /overrideEnv only,
// root only). As on the H200 (scripts/gpu-check.sh, "login nvidia-smi total").
func TestNvidiaSMIShowsTheLimit(t *testing.T) {
	bin, err := nvsmi.Locate()
	if err != nil {
		tier.Unavailable(t, tier.NvidiaSMI, err.Error())
	}
	e := newEnv(t)
	check := func(session, totals, screen string) {
		t.Helper()
		got, err := nvsmi.ParseTotals([]byte(totals))
		if err != nil || len(got) != 1 || got[0] != 3000 {
			t.Errorf("%s session: nvidia-smi memory.total = %v (%v), want 3000 MiB", session, got, err)
		}
		if !regexp.MustCompile(`\d+MiB /\s*3000MiB`).MatchString(screen) {
			t.Errorf("%s session: the default screen does not show the 3000 MiB limit:\n%s", session, screen)
		}
	}

	run := func(args ...string) string {
		c := exec.Command(bin, args...)
		c.Env = e.limited()
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		if err := c.Run(); err != nil {
			t.Fatalf("nvidia-smi %v under libvgpu.so: %v\n%s%s", args, err, out.String(), errb.String())
		}
		return out.String()
	}
	check("exec", run(nvsmi.TotalsArgs...), run())

	// The login session finds fakegpu's NVML where a container has the driver's.
	nvml := []string{"--file", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1=" + filepath.Join(e.p.Lib, "libnvidia-ml.so.1")}
	totals, stderr := e.inLogin("libvgpu.so", e.podLimits(), nvml, append([]string{bin}, nvsmi.TotalsArgs...)...)
	screen, _ := e.inLogin("libvgpu.so", e.podLimits(), nvml, bin)
	if strings.Contains(stderr, "Mismatch") {
		t.Fatalf("login session: nvidia-smi refused fakegpu: %s", stderr)
	}
	check("login", totals, screen)
}
