package node

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/sandbox/sandboxtest"
	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/plugin/allocate"
	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/deviceplugin/fakekubelet"
	"github.com/limitbed/limitbed/plugin/libvars"
)

func testConfig(t *testing.T, profile allocate.Profile, delivery v1.LimitDelivery) Config {
	paths := cbuild.Build(t)
	return Config{
		Dir:        fakekubelet.ShortTempDir(t),
		Artifacts:  Artifacts{Lib: paths.Lib, Bin: paths.Bin},
		GPUProfile: filepath.Join(paths.Root, "fakegpu", "profiles", "a16-16q.profile"),
		Plugin:     profile, Delivery: delivery, Core: "current",
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// shape is what must not depend on where the plugin runs: env names (values that embed the pod's
// UID or the node's temporary paths replaced by their kind), mount container paths.
func shape(p *Pod) string {
	var out []string
	for k, v := range p.Resp.GetEnvs() {
		switch k {
		case libvars.SharedCache, allocate.EnvVisibleDevices:
			v = "<varies>"
		}
		out = append(out, "env "+k+"="+v)
	}
	for _, m := range p.Resp.GetMounts() {
		out = append(out, "mount "+m.ContainerPath)
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// TestExternalPluginMatchesInProcess drives limitbed's own plugin binary the way a DaemonSet would
// (its mount namespace: the fixed device-plugins dir, HOOK_PATH=/usr/local, the node's /tmp;
// kubeconfig of harness/fakeapi, NODE_NAME, fakegpu as driver, HAMi's device ConfigMap with the
// delivery mode) and checks, for both compat profiles and both delivery modes: registration and the
// device list reach the fake kubelet; Allocate through the kubelet API returns the same environment
// and mounts as the in-process plugin, plus LIBCUDA_LOG_LEVEL from the ConfigMap's libCudaLogLevel;
// the pod's bind-phase in the fake API server ends at success, reached through the field-selector
// list and merge patches; in file mode the limits file exists on the host (the response's host paths
// are the node's); Close stops the process. Needs root: skipped otherwise, except under CI=true.
func TestExternalPluginMatchesInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin binary: skipped with -short")
	}
	sandboxtest.Host(t)
	bin, err := BuildPluginBinary(context.Background(), cbuild.RepoRoot(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		profile  allocate.Profile
		delivery v1.LimitDelivery
	}{
		{"current", "file"}, {"current", "env"}, {"hami-v2.10", "file"}, {"hami-v2.10", "env"},
	} {
		t.Run(string(tc.profile)+"/"+string(tc.delivery), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			spec := PodSpec{Name: "p", GPUMem: 3000}

			in, err := Start(ctx, testConfig(t, tc.profile, tc.delivery))
			if err != nil {
				t.Fatal(err)
			}
			want, err := in.Allocate(ctx, spec)
			in.Close()
			if err != nil {
				t.Fatal(err)
			}

			cfg := testConfig(t, tc.profile, tc.delivery)
			cfg.External = &ExternalPlugin{Path: bin, Args: []string{"--compat-profile=" + string(tc.profile), "--v=2"}}
			n, err := Start(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			got, err := n.Allocate(ctx, spec)
			if err != nil {
				t.Fatalf("%v%s", err, n.pluginLogTail())
			}
			if l := got.Resp.GetEnvs()["LIBCUDA_LOG_LEVEL"]; l != "1" {
				t.Errorf("LIBCUDA_LOG_LEVEL = %q, want 1 (the chart's libCudaLogLevel)", l)
			}
			delete(got.Resp.Envs, "LIBCUDA_LOG_LEVEL")
			if g, w := shape(got), shape(want); g != w {
				t.Fatalf("external Allocate response:\n%s\nin process:\n%s", g, w)
			}
			if l := got.Resp.GetEnvs()[libvars.MemoryLimitOf(0)]; l != "3000m" {
				t.Errorf("%s0 = %q, want 3000m", libvars.MemoryLimit+"_", l)
			}
			_, statErr := os.Stat(got.LimitsFile)
			if wantFile := tc.profile == "current" && tc.delivery == "file"; (statErr == nil) != wantFile {
				t.Errorf("limits file %s: stat err %v, want it to exist: %v", got.LimitsFile, statErr, wantFile)
			}
			phase, err := n.PodAnnotation(ctx, "p", annotations.BindPhase)
			if err != nil || phase != string(annotations.PhaseSuccess) {
				t.Fatalf("bind-phase = %q, %v; API requests:\n%s", phase, err, strings.Join(n.Requests(), "\n"))
			}
			if lock, err := n.NodeLock(ctx); err != nil || lock != "" {
				t.Errorf("node lock = %q (%v) after Allocate, want it released by the plugin", lock, err)
			}
			reqs := strings.Join(n.Requests(), "\n")
			for _, w := range []string{
				"GET /api/v1/pods?fieldSelector=spec.nodeName%3D" + Name + " 200",
				"PATCH /api/v1/namespaces/default/pods/p 200",
			} {
				if !strings.Contains(reqs, w) {
					t.Errorf("no %q among the plugin's API requests:\n%s", w, reqs)
				}
			}
			n.Close()
			select {
			case <-n.exited:
			default:
				t.Fatal("plugin process still running after Close")
			}
		})
	}
}

// TestExternalPluginFailsClearly: a binary that exits at once fails Start with its exit status and
// output instead of waiting for the registration timeout; an unknown placeholder is refused.
func TestExternalPluginFailsClearly(t *testing.T) {
	sandboxtest.Host(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	script := filepath.Join(t.TempDir(), "plugin.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"no flag $1 here\" >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "hami-v2.10", "env")
	cfg.External = &ExternalPlugin{Path: script, Args: []string{"--kubeconfig={kubeconfig}"}}
	start := time.Now()
	_, err := Start(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "no flag --kubeconfig=/") {
		t.Fatalf("Start = %v, want the exit status and the expanded flag in the output", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Start took %s: waited for the registration timeout", d)
	}
	if err := CheckArgs([]string{"--kubeconfig={kubeconfig}", "--node={nodename}"}); err == nil || !strings.Contains(err.Error(), "{nodename}") {
		t.Fatalf("CheckArgs = %v, want it to name {nodename}", err)
	}
	got, err := expand("--a={node} --b={hookpath}/x", map[string]string{"node": "n", "hookpath": "/h"})
	if err != nil || got != "--a=n --b=/h/x" {
		t.Fatalf("expand = %q, %v", got, err)
	}
}
