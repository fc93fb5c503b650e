package selftest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/gpureport/schema"
	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/internal/tier"
	"github.com/limitbed/limitbed/plugin/nvsmi"
)

// sections is every section of the tier, in its order (harness/gpu/gpu-check).
var sections = []string{"abi", "memory", "paths", "frameworks", "legacy", "overhead", "compute", "torch", "judge",
	"drivertruth", "timeslice", "sched", "fidelity"}

// injected is the check the second run records as failed (GPU_CHECK_INJECT_FAIL).
const injected = "memory/env symbols 4096"

// bundle is an unpacked bundle and the environment that runs it on fakegpu as if it were a card.
type bundle struct {
	dir, build string
	env        []string
}

// TestBundleOnFakegpu builds the bundle, runs every section against fakegpu (short runs), reads
// the report back, then runs memory again with a failure injected: it must lead the page and
// make compare exit 1.
func TestBundleOnFakegpu(t *testing.T) {
	for _, tool := range []string{"gcc", "make", "tar", "timeout"} {
		tier.Require(t, tier.Tool(tool).For("the GPU tier's self-test builds and unpacks the bundle"))
	}
	b := newBundle(t)
	r1 := filepath.Join(t.TempDir(), "r1")
	t0 := time.Now()
	code, out := b.run(t, nil, "--report", r1)
	t.Logf("full run on fakegpu: exit %d in %s", code, time.Since(t0).Round(time.Second))
	if code != 0 && code != 1 {
		t.Fatalf("./gpu-check exited %d (0 or 1 wanted: it could not run):\n%s", code, tail(out, 60))
	}
	rep := readReport(t, r1)
	if (code == 0) != (rep.Verdict == "pass") {
		t.Errorf("./gpu-check exited %d with a report that says %s", code, rep.Verdict)
	}
	checkFullRun(t, r1, rep, out)

	r2 := filepath.Join(t.TempDir(), "r2")
	code, out = b.run(t, []string{"GPU_CHECK_INJECT_FAIL=" + injected}, "--report", r2, "--previous", filepath.Join(r1, "report.json"), "memory")
	if code != 1 {
		t.Fatalf("with a failure injected ./gpu-check exited %d, want 1:\n%s", code, tail(out, 40))
	}
	checkInjected(t, r2, readReport(t, r2))

	lb := filepath.Join(b.dir, "bin", "limitbed")
	code, out = runCmd(t, b.env, lb, "gpu", "compare", filepath.Join(r1, "report.json"), filepath.Join(r2, "report.json"))
	if code != 1 || !strings.Contains(out, "REGRESSION") || !strings.Contains(out, "env symbols 4096") {
		t.Errorf("compare of the passing night with the injected failure: exit %d, want 1 naming the check:\n%s", code, out)
	}
	code, out = runCmd(t, b.env, lb, "gpu", "compare", filepath.Join(r1, "report.json"), filepath.Join(r1, "report.json"))
	if code != 0 || !strings.Contains(out, "no regression") {
		t.Errorf("compare of a report with itself: exit %d, want 0 and no regression:\n%s", code, out)
	}
}

// newBundle builds the bundle as make gpu-bundle does (with -race, which reuses make test's
// packages), unpacks it, and makes the environment of a card that is fakegpu.
func newBundle(t *testing.T) *bundle {
	p := cbuild.Build(t)
	tmp := t.TempDir()
	tarball := filepath.Join(tmp, "limitbed-gpu.tar")
	t0 := time.Now()
	build := exec.Command(filepath.Join(p.Root, "scripts", "gpu-bundle.sh"), tarball)
	build.Env = append(os.Environ(), "GPU_BUNDLE_GOFLAGS=-race")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/gpu-bundle.sh: %v\n%s", err, out)
	}
	if out, err := exec.Command("tar", "-C", tmp, "-xf", tarball).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	t.Logf("bundle built and unpacked in %s", time.Since(t0).Round(time.Second))
	state := filepath.Join(tmp, "gpu")
	if err := os.MkdirAll(state, 0o1777); err != nil {
		t.Fatal(err)
	}
	profiles := filepath.Join(p.Root, "fakegpu", "profiles")
	b := &bundle{dir: filepath.Join(tmp, "limitbed-gpu"), build: filepath.Join(p.Out, "gpu-selftest")}
	b.env = []string{"PATH=" + pathWithoutGo(t), "HOME=" + tmp, "TMPDIR=/tmp",
		"LD_LIBRARY_PATH=" + p.Lib, "LIBRARY_PATH=" + p.Lib,
		"FAKEGPU_PROFILE_DIR=" + profiles, "FAKEGPU_PROFILE=h100-80g", "FAKEGPU_STATE_DIR=" + state,
		"GPU_CHECK_FAKEGPU=1",
		// The race-built binaries would sleep 1 s at every successful exit (hundreds of records).
		"GORACE=atexit_sleep_ms=0",
		"GPU_CHECK_NS_ENV=LD_LIBRARY_PATH=" + p.Lib + " FAKEGPU_PROFILE=" + filepath.Join(profiles, "h100-80g.profile") + " FAKEGPU_STATE_DIR=" + state,
		"GPU_CHECK_NS_ARGS=--bind " + state + " --bind " + p.Lib + " --bind " + profiles,
		"GPU_CHECK_JUDGE_TRUTH=" + filepath.Join(p.Bin, "fgtruth") + " --csv",
		// Short runs: the self-test proves the tier runs and reports, not the limits' figures.
		"BENCH_SECONDS=3", "COMPUTE_BENCH_ARGS=--workloads uniform --limits 30 --policies force",
		"TIMESLICE_SECONDS=1", "FIDELITY_SECONDS=0.5", "PATH_STRESS_ITERS=20000", "OVERHEAD_PAIRS=1"}
	return b
}

// pathWithoutGo is PATH without the directories that hold a go binary (the GPU machine has none),
// with Debian's nvidia-smi where make test's dependencies extracted it.
func pathWithoutGo(t *testing.T) string {
	var keep []string
	if smi, err := nvsmi.Locate(); err == nil {
		keep = append(keep, filepath.Dir(smi))
	} else {
		t.Logf("no nvidia-smi (%v): its checks skip", err)
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(d, "go")); err == nil {
			continue
		}
		keep = append(keep, d)
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}

func (b *bundle) run(t *testing.T, extra []string, args ...string) (int, string) {
	t.Helper()
	args = append([]string{"--build", b.build}, args...)
	return runCmd(t, append(append([]string{}, b.env...), extra...), filepath.Join(b.dir, "gpu-check"), args...)
}

func runCmd(t *testing.T, env []string, bin string, args ...string) (int, string) {
	t.Helper()
	c := exec.Command(bin, args...)
	c.Env = env
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	}
	t.Fatalf("%s: %v\n%s", bin, err, out.String())
	return -1, ""
}

func readReport(t *testing.T, dir string) *schema.Report {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatalf("no report.json: %v", err)
	}
	r, err := schema.ReadReport(b, "report.json")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
