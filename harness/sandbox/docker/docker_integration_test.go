//go:build !nointegration

package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/harness/sandbox/sandboxtest"
)

// TestIntegrationDockerContainer starts a workload container as a runtime would from an Allocate
// response and proves the container sees the environment, cannot write read-only mounts (directory
// and single file), can write read-write ones, gets its devices, and is removed on Stop.
func TestIntegrationDockerContainer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	b := sandboxtest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	host := t.TempDir()
	roDir, rwDir := filepath.Join(host, "ro"), filepath.Join(host, "rw")
	limits := filepath.Join(host, "c.limits")
	for _, d := range []string{roDir, rwDir} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	sandboxtest.WriteFile(t, filepath.Join(roDir, "hello"), "hello from the host\n")
	sandboxtest.WriteFile(t, limits, "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n")

	name := sandboxtest.Name(t)
	c := sandboxtest.Start(t, b, sandbox.ContainerSpec{
		Name: name,
		Env:  map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "3000m"},
		Mounts: []sandbox.Mount{
			{HostPath: roDir, ContainerPath: "/mnt/ro", ReadOnly: true},
			{HostPath: rwDir, ContainerPath: "/mnt/rw"},
			{HostPath: limits, ContainerPath: "/overrideEnv", ReadOnly: true},
		},
		Devices: []sandbox.Device{{HostPath: "/dev/null", ContainerPath: "/dev/limitbed-fake0"}},
	})

	cases := []struct {
		name     string
		cmd      []string
		opts     sandbox.ExecOptions
		wantCode int
		stdout   string // substring
		stderr   string // substring
	}{
		{name: "container env seen by exec", cmd: []string{"printenv", "CUDA_DEVICE_MEMORY_LIMIT_0"}, stdout: "3000m"},
		{name: "exec env added", cmd: []string{"sh", "-c", "echo $CUDA_DEVICE_MEMORY_LIMIT_0 $EXTRA"},
			opts: sandbox.ExecOptions{Env: map[string]string{"EXTRA": "x1"}}, stdout: "3000m x1"},
		{name: "stdin, stdout, stderr and exit code", cmd: []string{"sh", "-c", "cat; echo oops >&2; exit 3"},
			opts: sandbox.ExecOptions{Stdin: strings.NewReader("piped\n")}, wantCode: 3, stdout: "piped", stderr: "oops"},
		{name: "exec as user", cmd: []string{"id", "-un"}, opts: sandbox.ExecOptions{User: sandbox.TenantUser}, stdout: sandbox.TenantUser},
		{name: "read-only dir mount readable", cmd: []string{"cat", "/mnt/ro/hello"}, stdout: "hello from the host"},
		{name: "read-only dir mount not writable", cmd: []string{"touch", "/mnt/ro/new"}, wantCode: 1, stderr: "Read-only file system"},
		{name: "read-only file mount not writable", cmd: []string{"sh", "-c", "echo X=1 >> /overrideEnv"}, wantCode: 2, stderr: "Read-only file system"},
		{name: "read-write mount writable", cmd: []string{"touch", "/mnt/rw/new"}},
		{name: "device node present", cmd: []string{"test", "-c", "/dev/limitbed-fake0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := c.Exec(ctx, tc.cmd, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tc.wantCode || !strings.Contains(string(res.Stdout), tc.stdout) || !strings.Contains(string(res.Stderr), tc.stderr) {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, stdout ~%q, stderr ~%q",
					tc.cmd, res.ExitCode, res.Stdout, res.Stderr, tc.wantCode, tc.stdout, tc.stderr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(rwDir, "new")); err != nil {
		t.Errorf("file written in the read-write mount is not on the host: %v", err)
	}
	if got, err := c.ReadFile(ctx, "/overrideEnv"); err != nil || string(got) != "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n" {
		t.Errorf("ReadFile(/overrideEnv) = %q, %v", got, err)
	}

	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); err != nil {
		t.Fatalf("container %s not found while running: %v", name, err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); err == nil {
		t.Errorf("container %s still exists after Stop", name)
	}
}
