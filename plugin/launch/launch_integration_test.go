//go:build !nointegration

package launch_test

import (
	"context"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/harness/sandbox/sandboxtest"
	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/internal/tier"
	"github.com/limitbed/limitbed/plugin/allocate"
	"github.com/limitbed/limitbed/plugin/launch"
	"github.com/limitbed/limitbed/plugin/paths"
)

const limitVar, limitVal = "CUDA_DEVICE_MEMORY_LIMIT_0", "3000m"

// TestIntegrationLaunchEnvDocker reproduces the design's table with real login machinery: in a
// workload container whose environment carries the device plugin's variable, every launch method
// runs `env`; exec, bash -c, & and su (environment kept) see the variable, while su -, sudo,
// sudo -i, runuser -l, login, ssh and cron do not. Each also checks the user the process ran as and
// that stdout, stderr and the exit code come back. cron takes up to a minute.
//
// The container's ld.so.preload names libvgpu.so and then the driver double (a core linked with
// -Wl,--no-as-needed, harness/matrix/node.DriverDouble), so every method's processes — login, sshd,
// cron, su, sudo — load fakegpu's libcuda.so.1 and libnvidia-ml.so.1 at start and run their fork
// handlers, and each job's shell must show both mapped. fakegpu's fork handler used to close the
// standard input of every child forked before cuInit: login lost its terminal and its job never ran.
func TestIntegrationLaunchEnvDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	t.Parallel()
	b := sandboxtest.Docker(t)
	p := cbuild.Build(t)
	preload := filepath.Join(t.TempDir(), "ld.so.preload")
	if err := os.WriteFile(preload, []byte(paths.ContainerLibPath+"\n"+node.DriverDoublePath+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.ContainerSpec{Env: map[string]string{limitVar: limitVal}, Mounts: []sandbox.Mount{
		{HostPath: filepath.Join(p.Lib, "libvgpu.so"), ContainerPath: paths.ContainerLibPath, ReadOnly: true},
		{HostPath: filepath.Join(p.Lib, node.DriverDouble), ContainerPath: node.DriverDoublePath, ReadOnly: true},
		{HostPath: preload, ContainerPath: paths.ContainerPreloadPath, ReadOnly: true},
	}}
	for _, lib := range allocate.FakeDriverLibs {
		spec.Mounts = append(spec.Mounts, sandbox.Mount{HostPath: filepath.Join(p.Lib, lib),
			ContainerPath: path.Join(allocate.ContainerFakeLibDir, lib), ReadOnly: true})
	}
	c := sandboxtest.Start(t, b, spec)
	for _, m := range launch.Methods() {
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			res := checkMethod(t, c, m)
			if got := res.Probe["libs"]; got != "libcuda.so.1 libnvidia-ml.so.1 " {
				t.Errorf("%s: the job's shell maps %q, want both driver libraries (the preload did not reach it)", m.Name, got)
			}
		})
	}
}

// TestIntegrationLaunchEnvHost runs the methods the host backend supports (everything but ssh and
// cron, which must report ErrUnsupported) with the same expectations.
func TestIntegrationLaunchEnvHost(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	b := sandboxtest.Host(t)
	c := sandboxtest.Start(t, b, sandbox.ContainerSpec{Env: map[string]string{limitVar: limitVal}})
	for _, m := range launch.Methods() {
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			if m.Name == "ssh" || m.Name == "cron" {
				_, err := launch.Run(context.Background(), c, m, "env")
				if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "host") {
					t.Fatalf("%s on the host backend: err = %v, want ErrUnsupported naming the backend", m.Name, err)
				}
				return
			}
			checkMethod(t, c, m)
		})
	}
}

// checkMethod runs a job through m and checks what comes back; the job's probe line also lists
// the driver libraries its shell has mapped ("libs").
func checkMethod(t *testing.T, c sandbox.Container, m launch.Method) launch.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	job := `libs=$(grep -o 'libcuda.so.1\|libnvidia-ml.so.1' /proc/$$/maps | sort -u | tr '\n' ' '); ` +
		`echo "{\"probe\":\"` + m.Name + `\",\"libs\":\"$libs\"}"; echo to-stderr >&2; exit 7`
	res, err := launch.Run(ctx, c, m, job)
	if errors.Is(err, sandbox.ErrUnsupported) && c.Backend() == "host" {
		// The host backend offers what this machine has installed (sudo is often absent); the
		// workload image has every tool, so there a missing one fails the test.
		tier.Unavailable(t, tier.HostLoginTools.For(m.Name), err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	got, has := res.Env[limitVar]
	switch {
	case m.KeepsEnv && got != limitVal:
		t.Errorf("%s: %s = %q (present %v), want %q: this method keeps the container's environment", m.Name, limitVar, got, has, limitVal)
	case !m.KeepsEnv && has:
		t.Errorf("%s: %s = %q is present, want absent: this method builds a fresh environment", m.Name, limitVar, got)
	}
	if res.User != m.User {
		t.Errorf("%s: ran as %q, want %q", m.Name, res.User, m.User)
	}
	if res.ExitCode != 7 || strings.TrimSpace(string(res.Stderr)) != "to-stderr" || res.Probe["probe"] != m.Name {
		t.Errorf("%s: exit %d, stderr %q, probe %v; want 7, to-stderr, %q", m.Name, res.ExitCode, res.Stderr, res.Probe, m.Name)
	}
	t.Logf("%s: user %s, %s present %v, %d variables, %v", m.Name, res.User, limitVar, has, len(res.Env), res.Elapsed.Round(time.Millisecond))
	return res
}
