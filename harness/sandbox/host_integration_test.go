//go:build !nointegration

package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/harness/sandbox/sandboxtest"
	"github.com/limitbed/limitbed/internal/tier"
)

// TestIntegrationHostContainer proves the host backend's single-file read-only mounts at
// /overrideEnv and /etc/ld.so.preload are visible inside the container and absent outside, that the
// container sees its environment, and that the host's /etc is left untouched, during and after.
func TestIntegrationHostContainer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	b := sandboxtest.Host(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// This test proves the container's copies do not leak onto the host.
	tier.Require(t, tier.CleanHost)
	etcBefore := snapshotDir(t, "/etc")

	host := t.TempDir()
	limits := filepath.Join(host, "c.limits")
	preload := filepath.Join(host, "ld.so.preload")
	sandboxtest.WriteFile(t, limits, "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n")
	sandboxtest.WriteFile(t, preload, "") // empty: nothing preloaded, but the mount point is what is tested
	lockDir := t.TempDir()
	tmpProbe := filepath.Join("/tmp", "limitbed-private-tmp-"+filepath.Base(host))
	c := sandboxtest.Start(t, b, sandbox.ContainerSpec{
		Env: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "3000m"},
		Mounts: []sandbox.Mount{
			{HostPath: limits, ContainerPath: "/overrideEnv", ReadOnly: true},
			{HostPath: preload, ContainerPath: "/etc/ld.so.preload", ReadOnly: true},
			{HostPath: host, ContainerPath: "/usr/local/vgpu"},
			{HostPath: lockDir, ContainerPath: "/tmp/vgpulock"},
		},
	})

	cases := []struct {
		name     string
		cmd      []string
		opts     sandbox.ExecOptions
		wantCode int
		stdout   string
		stderr   string
	}{
		{name: "file mount visible", cmd: []string{"cat", "/overrideEnv"}, stdout: "CUDA_DEVICE_MEMORY_LIMIT_0=3000m"},
		{name: "file mount read-only", cmd: []string{"sh", "-c", "echo X=1 >> /overrideEnv"}, wantCode: 2, stderr: "Read-only file system"},
		{name: "preload mount visible", cmd: []string{"test", "-f", "/etc/ld.so.preload"}},
		{name: "preload mount read-only", cmd: []string{"sh", "-c", ": > /etc/ld.so.preload"}, wantCode: 2, stderr: "Read-only file system"},
		{name: "read-write dir mount", cmd: []string{"touch", "/usr/local/vgpu/usage.cache"}},
		{name: "container env", cmd: []string{"printenv", "CUDA_DEVICE_MEMORY_LIMIT_0"}, stdout: "3000m"},
		{name: "exec env added", cmd: []string{"printenv", "EXTRA"}, opts: sandbox.ExecOptions{Env: map[string]string{"EXTRA": "x1"}}, stdout: "x1"},
		{name: "overlay is writable, privately", cmd: []string{"touch", "/etc/limitbed-overlay-probe"}},
		{name: "mount below /tmp", cmd: []string{"touch", "/tmp/vgpulock/lock"}},
		{name: "own /tmp", cmd: []string{"touch", tmpProbe}},
		{name: "exec as tenant", cmd: []string{"id", "-un"}, opts: sandbox.ExecOptions{User: sandbox.TenantUser}, stdout: sandbox.TenantUser},
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
	if _, err := os.Stat(filepath.Join(lockDir, "lock")); err != nil {
		t.Errorf("a write to the container's /tmp/vgpulock did not reach the mounted host directory: %v", err)
	}
	if _, err := os.Lstat(tmpProbe); err == nil {
		os.Remove(tmpProbe)
		t.Errorf("%s written in the container appeared in the host's /tmp: the container's /tmp must be its own", tmpProbe)
	}
	if _, err := os.Stat(filepath.Join(host, "usage.cache")); err != nil {
		t.Errorf("file written in the read-write mount is not on the host: %v", err)
	}
	checkHostClean := func(when string) {
		t.Helper()
		for _, p := range []string{"/overrideEnv", "/etc/ld.so.preload", "/etc/limitbed-overlay-probe"} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s: %s exists on the host", when, p)
			}
		}
		if after := snapshotDir(t, "/etc"); !slices.Equal(etcBefore, after) {
			t.Errorf("%s: the host's /etc changed:\nbefore %v\nafter  %v", when, etcBefore, after)
		}
	}
	checkHostClean("while running")
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	checkHostClean("after Stop")
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mountinfo), "limitbed-overlay") {
		t.Errorf("a container mount is visible in the host's mount table:\n%s", mountinfo)
	}
}

// snapshotDir lists a directory's entries with their modification times.
func snapshotDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, e.Name()+"@"+info.ModTime().String())
	}
	return out
}

// TestIntegrationHostPrivateTmp: a spec mount at /tmp replaces the container's own /tmp, mounts below it are
// allowed (their mount points are made in the spec's directory, not in the host's /tmp), and a
// process started with Spawn runs inside, with the exec environment, until Stop kills it.
func TestIntegrationHostPrivateTmp(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	b := sandboxtest.Host(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tmp, lock := t.TempDir(), t.TempDir()
	probe := "limitbed-private-tmp-probe"
	c := sandboxtest.Start(t, b, sandbox.ContainerSpec{Mounts: []sandbox.Mount{
		{HostPath: tmp, ContainerPath: "/tmp"},
		{HostPath: lock, ContainerPath: "/tmp/" + probe},
	}})
	res, err := c.Exec(ctx, []string{"sh", "-c", "touch /tmp/a /tmp/" + probe + "/b && ls /tmp"}, sandbox.ExecOptions{})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v, exit %d, stderr %s", err, res.ExitCode, res.Stderr)
	}
	for _, p := range []string{filepath.Join(tmp, "a"), filepath.Join(lock, "b")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("written inside, not on the host: %v", err)
		}
	}
	if _, err := os.Lstat("/tmp/" + probe); err == nil {
		t.Errorf("mount point /tmp/%s created in the host's /tmp", probe)
	}
	sp, ok := c.(sandbox.Spawner)
	if !ok {
		t.Fatal("host container is not a Spawner")
	}
	cmd, err := sp.Spawn(ctx, []string{"sh", "-c", `echo "$GREETING" > /tmp/spawned; exec sleep 600`},
		sandbox.ExecOptions{Env: map[string]string{"GREETING": "hello"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if data, err := os.ReadFile(filepath.Join(tmp, "spawned")); err == nil && strings.TrimSpace(string(data)) == "hello" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("spawned process did not write /tmp/spawned with its environment")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("spawned process still running after Stop")
	}
}
