package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/harness/tiers"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/schedproto"
)

// TestHelpDescribesWhatExists pins the help texts to the code: no command says a tier is missing
// that the repository has, and e2e names the runner that make e2e uses.
func TestHelpDescribesWhatExists(t *testing.T) {
	root, err := sandbox.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), nil, &out, &errb); code != 2 {
		t.Fatalf("no arguments: exit %d, want 2 (usage)", code)
	}
	usage := errb.String()
	for _, c := range commands {
		if !strings.Contains(usage, "  "+c.name+" ") {
			t.Errorf("usage does not list %q:\n%s", c.name, usage)
		}
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"e2e", "--help"}, &out, &errb); code != 0 {
		t.Fatalf("e2e --help: exit %d, stderr %s", code, errb.String())
	}
	help := usage + errb.String()
	for _, stale := range []string{"not yet", "not available", "does not exist"} {
		if strings.Contains(help, stale) {
			t.Errorf("help says %q:\n%s", stale, help)
		}
	}
	if !strings.Contains(errb.String(), "scripts/e2e.sh") || !strings.Contains(errb.String(), "make e2e") {
		t.Errorf("e2e --help does not name its runner:\n%s", errb.String())
	}
	// The runner it names exists and is what make e2e calls, running the kind-tagged tests.
	script, err := os.ReadFile(filepath.Join(root, "scripts", "e2e.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "-tags kind") || !strings.Contains(string(script), "./harness/e2e/") {
		t.Errorf("scripts/e2e.sh no longer runs the kind tier's tests (go test -tags kind ./harness/e2e/)")
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "@scripts/e2e.sh") {
		t.Errorf("make e2e no longer runs scripts/e2e.sh: limitbed e2e and make e2e would differ")
	}
}

// TestDoctorReportsProbes: one line per tier, each the verdict of the same probe that the
// testscript conditions use, with a fix for every "no".
func TestDoctorReportsProbes(t *testing.T) {
	if testing.Short() {
		t.Skip("probes docker, kind and nvidia-smi: skipped with -short")
	}
	root, err := sandbox.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"doctor"}, &out, &errb); code != 0 {
		t.Fatalf("doctor: exit %d, stderr %s", code, errb.String())
	}
	want := tiers.Probe(context.Background(), slog.New(slog.DiscardHandler), root)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	i := 0
	for _, r := range want {
		if i >= len(lines) {
			t.Fatalf("doctor output ends before tier %s:\n%s", r.Tier, out.String())
		}
		verdict := "yes: "
		if !r.OK {
			verdict = "no: "
		}
		if f := strings.Fields(lines[i]); len(f) < 2 || f[0] != r.Tier || f[1]+" " != verdict {
			t.Errorf("line %q: want tier %s %s(probe: %+v)", lines[i], r.Tier, verdict, r)
		}
		i++
		if !r.OK {
			if i >= len(lines) || !strings.Contains(lines[i], "fix: "+r.Fix) {
				t.Errorf("tier %s is unavailable but doctor gives no fix line", r.Tier)
			}
			i++
		}
	}
	if strings.Contains(out.String(), "does not exist") {
		t.Errorf("doctor claims a tier does not exist:\n%s", out.String())
	}
}

// TestDoctorLiveFlagsAreLimitbedDoctor: with flags, limitbed doctor is limitbed-doctor's command
// line (plugin/doctor.CLI; its modes are tested with plugin/cmd/limitbed-doctor): a flag without a
// target is the same usage error, and -h shows both the probe and the live modes.
func TestDoctorLiveFlagsAreLimitbedDoctor(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"doctor", "--json"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "need --pod or --node") {
		t.Errorf("doctor --json: exit %d, stderr %s", code, errb.String())
	}
	errb.Reset()
	if code := run(context.Background(), []string{"doctor", "-h"}, &out, &errb); code != 0 ||
		!strings.Contains(errb.String(), "which test tiers this machine can run") ||
		!strings.Contains(errb.String(), "limitbed doctor --node NODE") {
		t.Errorf("doctor -h: exit %d, usage %s", code, errb.String())
	}
}

// TestMatrixScriptWithoutEngine: without root and without a Docker engine, make matrix's script
// installs nothing and stops with exit 2 and the command that fixes it, instead of reporting every
// cell as a mismatch. As root the test drops to nobody; DOCKER_HOST points at no engine.
func TestMatrixScriptWithoutEngine(t *testing.T) {
	root, err := sandbox.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{filepath.Join(root, "scripts", "matrix.sh")}
	if os.Geteuid() == 0 {
		argv = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix:///nonexistent/docker.sock", "HOME=/nonexistent")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("scripts/matrix.sh without root or engine: %v, want exit 2; output:\n%s", err, out)
	}
	for _, want := range []string{"no Docker engine answers", "sudo scripts/install-deps.sh", "sudo make matrix"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output does not say %q:\n%s", want, out)
		}
	}
}

// bench compute's shared-GPU flags refuse what they cannot run, with exit 2 and the fix named,
// before anything is built or started; --scenario list names every scenario.
func TestBenchSharedFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--container", "limit=30", "--real"}, "fakegpu only"},
		{[]string{"--container", "limit=300"}, "limit=300"},
		{[]string{"--container", "colour=blue"}, "unknown key"},
		{[]string{"--scenario", "nope"}, "force-30-50-mix"},
		{[]string{"--scenario", "force-30-50-mix", "--container", "limit=30"}, "give one"},
		{[]string{"--container", "limit=30", "--env", "NOVALUE"}, "KEY=VALUE"},
		{[]string{"--container", "limit=30,start=5s", "--seconds", "6"}, "needs 3 s more"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"bench", "compute"}, c.args...), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("bench compute %v: exit %d, stderr %q; want exit 2 naming %q", c.args, code, errb.String(), c.want)
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"bench", "compute", "--scenario", "list"}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "force-16-sum-100") || !strings.Contains(out.String(), "force-8x8-gpus") {
		t.Errorf("--scenario list: exit %d, %q", code, out.String())
	}
}

func TestBusyAfter(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{0, 0.5, 1, 0.9}, 0.95},
		{[]float64{0, 0.5, -1, 0.9}, 0.9},
		{[]float64{0.3, 0.5}, -1},
		{nil, -1},
	} {
		if got := busyAfter(tc.in, 2); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("busyAfter(%v, 2) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestBenchPodFiles: `limitbed bench pod` writes the device plugin's files for a scheduled
// container (the limits file the library reads, the grant file the scheduler drives), and
// refuses what it cannot write with the flag named.
func TestBenchPodFiles(t *testing.T) {
	hook := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--hook", hook, "--container", "name=a,limit=30"}, "required"},
		{[]string{"--hook", hook, "--gpu", "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50", "--container", "name=a,colour=blue"}, "unknown key"},
		{[]string{"--hook", hook, "--gpu", "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50", "--container", "name=a,policy=none"}, "policy none"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"bench", "pod"}, c.args...), &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("bench pod %v: exit %d, stderr %q; want exit 2 naming %q", c.args, code, errb.String(), c.want)
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"bench", "pod", "--hook", hook, "--gpu", "MIG-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50", "--container", "name=a,limit=30"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "GPU-") {
		t.Errorf("a MIG UUID: exit %d, stderr %q; want exit 1 naming the GPU- prefix", code, errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"bench", "pod", "--hook", hook, "--gpu", "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50", "--container", "name=p30,limit=30,priority=1"}, &out, &errb); code != 0 {
		t.Fatalf("bench pod: exit %d, stderr %s", code, errb.String())
	}
	dir := filepath.Join(hook, "vgpu", "containers", "p30_main")
	if want := dir + " " + dir + ".limits " + filepath.Join(hook, "vgpu", "sched", "p30_main.grant") + "\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
	lim := limitsfile.Parse(mustRead(t, dir+".limits"))
	if lim.Vars["CUDA_DEVICE_SM_LIMIT"] != "30" || lim.Vars["CUDA_TASK_PRIORITY"] != "1" || lim.Vars["GPU_CORE_UTILIZATION_POLICY"] != "force" {
		t.Errorf("limits file: %+v", lim.Vars)
	}
	g, err := schedproto.OpenGrant(filepath.Join(hook, "vgpu", "sched", "p30_main.grant"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if gpus := g.GPUs(); len(gpus) != 1 || gpus[0].String() != "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50" {
		t.Errorf("grant file names %v", gpus)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Errorf("no cache directory %s: %v", dir, err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
