package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/deviceplugin/fakekubelet"
	"github.com/limitbed/limitbed/plugin/gpu/fakenvml"
)

func noEnv(string) string { return "" }

// TestRunRejectsBadFlags: run fails before doing anything, with an error
// that names the offending flag (or its environment twin).
func TestRunRejectsBadFlags(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		mention string
	}{
		{"unknown flag", []string{"--node-name=n", "--bogus=1"}, nil, "-bogus"},
		{"missing node name", nil, nil, "--node-name"},
		{"bad bool", []string{"--node-name=n", "--health-checks=maybe"}, nil, "-health-checks"},
		{"bad env twin", []string{"--node-name=n"}, map[string]string{"HEALTH_CHECKS": "maybe"}, "--health-checks"},
		{"fake driver without libs", []string{"--node-name=n", "--fake-driver"}, nil, "--fake-driver-lib-dir"},
		{"bad compat profile", []string{"--node-name=n", "--compat-profile=hami-v9", "--kubelet-socket=",
			"--node-config-file=" + filepath.Join(t.TempDir(), "none.json")}, nil, "--compat-profile"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := run(ctx, tc.args, getenv)
			if err == nil || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("err = %v, want it to name %q", err, tc.mention)
			}
		})
	}
}

// writeKubeconfig points the client at an address nothing listens on: the
// plugin needs the API server only to allocate, not to register.
func writeKubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	const cfg = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startKubelet starts a fake kubelet on a short temporary device-plugins
// directory, stopped when the test ends.
func startKubelet(t *testing.T) (*fakekubelet.Kubelet, string) {
	t.Helper()
	dir := fakekubelet.ShortTempDir(t)
	kl, err := fakekubelet.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kl.Stop)
	return kl, dir
}

// TestRunRegistersAndStops: the real main path against the fake kubelet and
// fakegpu's NVML registers the resource, advertises the fake GPUs split as
// configured, and returns nil, removing its socket, when ctx is cancelled.
func TestRunRegistersAndStops(t *testing.T) {
	_, nvmlPath := fakenvml.Setup(t, "2x-a16-16q")
	kl, dir := startKubelet(t)
	tmp := t.TempDir()
	devCfg := filepath.Join(tmp, "device-config.yaml")
	if err := os.WriteFile(devCfg, []byte("version: v1\nnvidia:\n  resourceCountName: nvidia.com/gpu\n  deviceSplitCount: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{
		"--node-name=n1",
		"--kubeconfig=" + writeKubeconfig(t),
		"--device-config-file=" + devCfg,
		"--node-config-file=" + filepath.Join(tmp, "none.json"),
		"--device-plugin-dir=" + dir,
		"--socket-name=vgpu.sock",
		"--kubelet-socket=" + kl.Socket,
		"--hook-path=" + filepath.Join(tmp, "hook"),
		"--vgpu-lock-dir=" + filepath.Join(tmp, "lock"),
		"--nvml-library=" + nvmlPath,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, noEnv) }()

	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	reg, err := kl.WaitForRegistration(wctx)
	if err != nil {
		t.Fatalf("no registration: %v", err)
	}
	if reg.ResourceName != "nvidia.com/gpu" || reg.Endpoint != "vgpu.sock" || reg.Version != pluginapi.Version {
		t.Fatalf("registration = %+v", reg)
	}
	p, err := kl.Dial(reg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	watch, err := p.Watch(wctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	select {
	case devs := <-watch:
		for _, d := range devs {
			ids = append(ids, d.ID+"="+d.Health)
		}
	case <-wctx.Done():
		t.Fatal("no device list")
	}
	want := "[GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50-0=Healthy GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50-1=Healthy " +
		"GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f51-0=Healthy GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f51-1=Healthy]"
	if got := "[" + strings.Join(ids, " ") + "]"; got != want {
		t.Fatalf("devices = %s, want %s", got, want)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	if _, err := os.Stat(filepath.Join(dir, "vgpu.sock")); !os.IsNotExist(err) {
		t.Fatalf("plugin socket left behind: %v", err)
	}
}
