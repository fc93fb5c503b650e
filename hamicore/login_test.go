package hamicore_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/tier"
)

// loginSession runs allocprobe the way an SSH / su - / cron process starts: NO environment at
// all (env -i), the library loaded only through /etc/ld.so.preload, the limits only in
// /overrideEnv — both placed in a private mount namespace by test/privatens (root only). The
// fake GPU's profile goes to fakegpu's default path inside the namespace, so not even FAKEGPU_*
// variables are needed.
func (e *env) loginSession(lib, limits string, args ...string) (probeResult, string) {
	e.t.Helper()
	out, stderr := e.inLogin(lib, limits, []string{"--private-tmp"}, // v2.10's fallback /tmp/cudevshr.cache must be fresh, as in a new container
		append([]string{filepath.Join(e.p.Bin, "hamicore-allocprobe")}, args...)...)
	return parseProbe(e.t, out)[0], stderr
}

// inLogin runs cmd (absolute) with no environment in the private mount namespace loginSession
// describes; extra are more privatens options. Its stdout and stderr.
func (e *env) inLogin(lib, limits string, extra []string, cmd ...string) (string, string) {
	e.t.Helper()
	tier.Require(e.t, tier.Root.For("unshare -m and mounts (the login-session tests build a private mount namespace)"), tier.Tool("unshare"))
	profile := os.Getenv("FAKEGPU_PROFILE")
	if profile == "" {
		profile = filepath.Join(e.p.Root, "fakegpu", "profiles", "a16-16q.profile")
	} else if !strings.Contains(profile, "/") {
		profile = filepath.Join(os.Getenv("FAKEGPU_PROFILE_DIR"), profile+".profile")
	}
	limitsFile := filepath.Join(e.t.TempDir(), "limits")
	if err := os.WriteFile(limitsFile, []byte(limits), 0o644); err != nil {
		e.t.Fatal(err)
	}
	argv := append([]string{
		"--preload", filepath.Join(e.p.Lib, lib),
		"--override-env", limitsFile,
		"--file", "/etc/fakegpu/profile=" + profile,
		"--bind", e.p.Out, "--bind", filepath.Dir(e.pod),
	}, extra...)
	argv = append(append(argv, "--", "env", "-i"), cmd...)
	c := exec.Command(filepath.Join(e.p.Root, "hamicore", "test", "privatens"), argv...)
	c.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	var errb strings.Builder
	c.Stderr = &errb
	out, err := c.Output()
	if err != nil {
		e.t.Fatalf("privatens: %v\nstdout: %s\nstderr: %s", err, out, errb.String())
	}
	return string(out), errb.String()
}

func (e *env) podLimits() string {
	return fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT_0=3000m\nCUDA_DEVICE_MEMORY_SHARED_CACHE=%s\nCUDA_DEVICE_SM_LIMIT=50\nHAMI_LIMITS_FORMAT=1\n", e.cache)
}

// The bug this project exists for: a login session (no environment) is capped by the limits
// file and joins the pod's usage.cache.
func TestLoginSessionCappedByOverrideEnv(t *testing.T) {
	e := newEnv(t)
	r, _ := e.loginSession("libvgpu.so", e.podLimits(), "--mib", "4096")
	if !refused(r) || r.TotalMiB != 3000 {
		t.Fatalf("env -i process with /overrideEnv: %+v, want 4096 MiB refused and a 3000 MiB device", r)
	}
	reg := e.dump()
	joined := false
	for _, s := range reg.Slots {
		joined = joined || s.Pid == r.Pid
	}
	if !joined || reg.device(0).LimitBytes != 3000*mib {
		t.Fatalf("the login-session process (pid %d) did not join the pod's usage.cache: %+v", r.Pid, reg)
	}
}

// The same with the v2.10 profile reproduces the upstream bug: granted, and the pod never sees it.
func TestLoginSessionLegacyProfileUncapped(t *testing.T) {
	e := newEnv(t)
	r, _ := e.loginSession("libvgpu-hami-v2.10.so", e.podLimits(), "--mib", "4096")
	if !granted(r) {
		t.Fatalf("v2.10 profile, env -i process: %+v, want 4096 MiB granted (the upstream bug)", r)
	}
	if _, err := os.Stat(e.cache); !os.IsNotExist(err) {
		t.Fatalf("v2.10 profile: the env-less process created/joined %s (err %v)", e.cache, err)
	}
}

// A damaged file end to end: every kind of bad line is reported with its number and skipped,
// and the lines after them still apply (CRLF limit = 3000 MiB, not 3000 bytes).
func TestLoginSessionMalformedFile(t *testing.T) {
	e := newEnv(t)
	limits := "CUDA_DEVICE_SM_LIMIT=30\n" + // 1
		"no equals sign\n" + // 2 skipped
		"\n" + // 3 skipped
		"=value\n" + // 4 skipped
		"\x01\xff\xfe binary garbage\x00\n" + // 5 skipped
		"CUDA_DEVICE_MEMORY_LIMIT_0=3000mb\n" + // 6 skipped
		"X=" + strings.Repeat("y", 1<<20) + "\n" + // 7 skipped (1 MiB)
		"CUDA_DEVICE_MEMORY_LIMIT_0=3000m\r\n" + // 8 applies
		"CUDA_DEVICE_MEMORY_SHARED_CACHE=" + e.cache + "\r\n" // 9 applies
	r, stderr := e.loginSession("libvgpu.so", limits, "--mib", "4096")
	if !refused(r) || r.TotalMiB != 3000 {
		t.Fatalf("malformed /overrideEnv: %+v, want 4096 MiB refused under 3000 MiB\nstderr: %s", r, stderr)
	}
	for _, n := range []int{2, 3, 4, 5, 6, 7} {
		if want := fmt.Sprintf("/overrideEnv line %d:", n); !strings.Contains(stderr, want) || !strings.Contains(stderr, "ERROR") {
			t.Errorf("stderr does not report %q as an ERROR:\n%s", want, stderr)
		}
	}
	if r2, _ := e.loginSession("libvgpu.so", limits, "--mib", "2048"); !granted(r2) {
		t.Errorf("malformed /overrideEnv, 2048 MiB: %+v, want granted", r2)
	}
}

// The file beats the environment: a process whose environment says 8000m is capped at 3000m.
func TestFileBeatsEnvironment(t *testing.T) {
	tier.Require(t, tier.Root.For("unshare -m and mounts (a private /overrideEnv)"))
	e := newEnv(t)
	limitsFile := filepath.Join(t.TempDir(), "limits")
	if err := os.WriteFile(limitsFile, []byte(e.podLimits()), 0o644); err != nil {
		t.Fatal(err)
	}
	c := exec.Command(filepath.Join(e.p.Root, "hamicore", "test", "privatens"),
		"--override-env", limitsFile, "--bind", e.p.Out, "--bind", filepath.Dir(e.pod), "--bind", "/tmp", "--",
		"env", "CUDA_DEVICE_MEMORY_LIMIT_0=8000m", "LD_PRELOAD="+filepath.Join(e.p.Lib, "libvgpu.so"),
		filepath.Join(e.p.Bin, "hamicore-allocprobe"), "--mib", "4096")
	c.Env = e.base
	out, err := c.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r := parseProbe(t, string(out))[0]; !refused(r) || r.TotalMiB != 3000 {
		t.Fatalf("file 3000m vs environment 8000m: %+v, want the file's 3000 MiB", r)
	}
}

// In file mode nothing in a process's environment loosens what /overrideEnv governs: not a switch
// the file does not carry, not a value for a key the file carries, not a fallback for a file line
// that was rejected. Each case runs like TestFileBeatsEnvironment: the file in place, the
// variables in the process's own environment.
func TestFileModeEnvironmentCannotLoosen(t *testing.T) {
	tier.Require(t, tier.Root.For("unshare -m and mounts (a private /overrideEnv)"))
	cases := []struct {
		name  string
		file  func(e *env) string
		env   []string
		total int // MiB the probe must see as the device's total
	}{
		{"CUDA_DISABLE_CONTROL", (*env).podLimits, []string{"CUDA_DISABLE_CONTROL=true"}, 3000},
		{"global limit 0 and every device 0", (*env).podLimits, []string{"CUDA_DEVICE_MEMORY_LIMIT=0", "CUDA_DEVICE_MEMORY_LIMIT_0=0"}, 3000},
		{"rejected file line is not filled from the environment", func(e *env) string {
			return "CUDA_DEVICE_MEMORY_LIMIT_0=3000x\nCUDA_DEVICE_MEMORY_SHARED_CACHE=" + e.cache + "\nHAMI_LIMITS_FORMAT=1\n"
		}, []string{"CUDA_DEVICE_MEMORY_LIMIT_0=0"}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			limitsFile := filepath.Join(t.TempDir(), "limits")
			if err := os.WriteFile(limitsFile, []byte(tc.file(e)), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"--override-env", limitsFile, "--bind", e.p.Out, "--bind", filepath.Dir(e.pod), "--bind", "/tmp", "--", "env"}
			args = append(args, tc.env...)
			args = append(args, "LD_PRELOAD="+filepath.Join(e.p.Lib, "libvgpu.so"), filepath.Join(e.p.Bin, "hamicore-allocprobe"), "--mib", "4096")
			c := exec.Command(filepath.Join(e.p.Root, "hamicore", "test", "privatens"), args...)
			c.Env = e.base
			var errb strings.Builder
			c.Stderr = &errb
			out, err := c.Output()
			if err != nil {
				t.Fatalf("%v: %s\n%s", err, out, errb.String())
			}
			if r := parseProbe(t, string(out))[0]; !refused(r) || r.TotalMiB != tc.total {
				t.Fatalf("file mode, environment %v: %+v, want 4096 MiB refused and a %d MiB device\nstderr: %s", tc.env, r, tc.total, errb.String())
			}
		})
	}
}
