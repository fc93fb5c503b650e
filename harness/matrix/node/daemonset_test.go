package node

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/harness/sandbox/sandboxtest"
	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/internal/tier"
	"github.com/limitbed/limitbed/plugin/annotations"
)

// buildWirePlugin builds the test plugin that speaks HAMi's plugin protocol (internal/wireplugin).
func buildWirePlugin(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "wireplugin")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./harness/matrix/node/internal/wireplugin")
	cmd.Dir = cbuild.RepoRoot()
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build wireplugin: %v\n%s", err, msg)
	}
	return out
}

// TestDaemonSetFixedSocketDir runs a plugin that knows only the kubelet's fixed paths
// (/var/lib/kubelet/device-plugins/{kubelet.sock,limitbed-wire.sock}) in the node's DaemonSet
// namespace and checks the whole protocol HAMi's plugin speaks: it registers with the fake kubelet,
// its socket lands in the fake kubelet's directory and nowhere in the host's /var/lib/kubelet, it
// patches the node's hami.io/node-nvidia-register, and Allocate (through the kubelet API, the pod
// placed by harness/scheduler under the node lock) ends with the container's entry popped from
// hami.io/vgpu-devices-to-allocate, bind-phase success and the lock released with a
// resourceVersion. Needs root (mount namespaces): skipped otherwise, except under CI=true.
func TestDaemonSetFixedSocketDir(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a plugin binary: skipped with -short")
	}
	sandboxtest.Host(t) // root and util-linux, or skip (never under CI=true)
	hostDP := "/var/lib/kubelet/device-plugins/limitbed-wire.sock"
	if _, err := os.Lstat(hostDP); err == nil {
		t.Fatalf("%s exists on the host before the test", hostDP)
	}
	_, kubeletBefore := os.Lstat("/var/lib/kubelet")
	bin := buildWirePlugin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cfg := testConfig(t, "hami-v2.10", "env")
	cfg.External = &ExternalPlugin{Path: bin, Args: []string{"--split={splitcount}"}}
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	if _, err := os.Stat(filepath.Join(n.cfg.Dir, "dp", "limitbed-wire.sock")); err != nil {
		t.Errorf("plugin socket not in the fake kubelet's directory: %v", err)
	}
	if _, err := os.Lstat(hostDP); err == nil {
		t.Errorf("plugin socket created in the host's %s", hostDP)
	}
	if _, err := os.Lstat("/var/lib/kubelet"); (err == nil) != (kubeletBefore == nil) {
		t.Errorf("the host's /var/lib/kubelet: before %v, now %v", kubeletBefore, err)
	}
	node, ok := n.api.Node(Name)
	if !ok {
		t.Fatal("node missing from the API server")
	}
	var reg []map[string]any
	if err := json.Unmarshal([]byte(node.Annotations[annotations.NodeRegister]), &reg); err != nil || len(reg) != 1 {
		t.Fatalf("hami.io/node-nvidia-register = %q (%v), want one device", node.Annotations[annotations.NodeRegister], err)
	}

	p, err := n.Allocate(ctx, PodSpec{Name: "p", GPUMem: 3000})
	if err != nil {
		t.Fatalf("%v%s", err, n.pluginLogTail())
	}
	if got := p.Resp.GetEnvs()["CUDA_DEVICE_MEMORY_LIMIT_0"]; got != "3000m" {
		t.Errorf("CUDA_DEVICE_MEMORY_LIMIT_0 = %q, want 3000m", got)
	}
	pod, _ := n.api.Pod("default", "p")
	if got := pod.Annotations[annotations.BindPhase]; got != string(annotations.PhaseSuccess) {
		t.Errorf("bind-phase = %q, want success", got)
	}
	if got := pod.Annotations[annotations.DevicesToAllocate]; got != ";" {
		t.Errorf("devices-to-allocate = %q, want the container's entry popped (\";\")", got)
	}
	if lock, err := n.NodeLock(ctx); err != nil || lock != "" {
		t.Errorf("node lock = %q (%v) after Allocate, want it released", lock, err)
	}
	reqs := strings.Join(n.Requests(), "\n")
	for _, w := range []string{
		"GET /api/v1/nodes/" + Name + " 200",
		"PATCH /api/v1/nodes/" + Name + " 200",
		"GET /api/v1/namespaces/default/pods/p 200",
		"PATCH /api/v1/namespaces/default/pods/p 200",
	} {
		if !strings.Contains(reqs, w) {
			t.Errorf("no %q among the API requests:\n%s", w, reqs)
		}
	}
	log, _ := os.ReadFile(filepath.Join(n.cfg.Dir, "plugin.log"))
	if !strings.Contains(string(log), "socket /var/lib/kubelet/device-plugins/limitbed-wire.sock") ||
		!strings.Contains(string(log), "released ") || !strings.Contains(string(log), ",default,p") {
		t.Errorf("plugin output:\n%s", log)
	}
	n.Close()
	if _, err := os.Lstat(hostDP); err == nil {
		t.Errorf("plugin socket in the host's %s after Close", hostDP)
	}
}

// HAMiPluginEnv names an unmodified build of HAMi's NVIDIA device plugin for TestDaemonSetHAMiPlugin
// (none is part of this repository; docs/matrix.md says where one comes from).
const HAMiPluginEnv = "LIMITBED_HAMI_PLUGIN"

// TestDaemonSetHAMiPlugin runs HAMi's own plugin binary, unmodified, in the node's DaemonSet
// namespace, with the chart's arguments and HAMi's device ConfigMap, and checks that it speaks the
// protocol the harness serves: it registers its devices in hami.io/node-nvidia-register, and
// Allocate of a pod placed under the node lock returns HAMi's limits, pops
// hami.io/vgpu-devices-to-allocate, sets bind-phase success and releases the lock. Runs when
// LIMITBED_HAMI_PLUGIN names the binary (and as root).
func TestDaemonSetHAMiPlugin(t *testing.T) {
	bin := os.Getenv(HAMiPluginEnv)
	if bin == "" {
		tier.Unavailable(t, tier.HAMiPlugin, HAMiPluginEnv+" is not set")
	}
	sandboxtest.Host(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := testConfig(t, "hami-v2.10", "env")
	cfg.External = &ExternalPlugin{Path: bin, Args: []string{"--config-file={deviceconfig}", "--kubelet-socket={kubeletsocket}"}}
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	p, err := n.Allocate(ctx, PodSpec{Name: "p", GPUMem: 3000, Cores: 30})
	if err != nil {
		t.Fatalf("%v%s", err, n.pluginLogTail())
	}
	envs := p.Resp.GetEnvs()
	if envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "3000m" || envs["CUDA_DEVICE_SM_LIMIT"] != "30" {
		t.Errorf("limits in the response: %v", envs)
	}
	if _, err := os.Stat(p.CacheDir); err != nil {
		t.Errorf("the pod's cache directory on the node: %v", err)
	}
	pod, _ := n.api.Pod("default", "p")
	if got := pod.Annotations[annotations.BindPhase]; got != string(annotations.PhaseSuccess) {
		t.Errorf("bind-phase = %q, want success", got)
	}
	if got := pod.Annotations[annotations.DevicesToAllocate]; strings.Contains(got, "NVIDIA") {
		t.Errorf("devices-to-allocate = %q, want the entry popped", got)
	}
	if lock, err := n.NodeLock(ctx); err != nil || lock != "" {
		t.Errorf("node lock = %q (%v) after Allocate, want it released", lock, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		node, _ := n.api.Node(Name)
		if node.Annotations[annotations.NodeRegister] != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no hami.io/node-nvidia-register on the node; requests:\n%s", strings.Join(n.Requests(), "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("HAMi's requests:\n%s", strings.Join(n.Requests(), "\n"))
}

// TestDaemonSetHostPath: paths the plugin names in its response map through the deepest mount to
// the node's files; paths outside every mount are the host's own.
func TestDaemonSetHostPath(t *testing.T) {
	d := &daemonSet{mounts: []sandbox.Mount{
		{HostPath: "/n/tmp", ContainerPath: "/tmp"},
		{HostPath: "/n", ContainerPath: "/n"},
		{HostPath: "/n/vgpulock", ContainerPath: "/tmp/vgpulock"},
		{HostPath: "/n/hook/vgpu", ContainerPath: "/usr/local/vgpu"},
	}}
	for in, want := range map[string]string{
		"/usr/local/vgpu/containers/u_main": "/n/hook/vgpu/containers/u_main",
		"/usr/local/vgpu/libvgpu.so":        "/n/hook/vgpu/libvgpu.so",
		"/usr/local/vgpu":                   "/n/hook/vgpu",
		"/usr/local/vgpuX":                  "/usr/local/vgpuX",
		"/tmp/vgpulock":                     "/n/vgpulock",
		"/tmp/hami/x":                       "/n/tmp/hami/x",
		"/n/fakegpu":                        "/n/fakegpu",
		"/dev/null":                         "/dev/null",
	} {
		if got := d.hostPath(in); got != want {
			t.Errorf("hostPath(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestHAMiDeviceConfigMatchesChart: the device-config.yaml handed to external plugins is HAMi's
// chart rendering (../shared/fixtures/hami/device-config.yaml) key for key, plus only limitbed's
// delivery keys when set.
func TestHAMiDeviceConfigMatchesChart(t *testing.T) {
	fixture, err := os.ReadFile(filepath.Join(cbuild.RepoRoot(), "..", "shared", "fixtures", "hami", "device-config.yaml"))
	if err != nil {
		tier.Unavailable(t, tier.Fixtures, err.Error())
	}
	var want map[string]any
	if err := yaml.Unmarshal(fixture, &want); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		v     hamiConfigValues
		extra map[string]any
	}{
		{v: hamiConfigValues{Resource: ResourceName, SplitCount: 10}},
		{v: hamiConfigValues{Resource: ResourceName, SplitCount: 10, LimitDelivery: "file", AllowPodEnv: true},
			extra: map[string]any{"limitDelivery": "file", "allowPodLimitDeliveryOverride": true}},
	} {
		data, err := hamiDeviceConfig(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := yaml.Unmarshal(data, &got); err != nil {
			t.Fatalf("rendered config does not parse: %v\n%s", err, data)
		}
		nv := got["nvidia"].(map[string]any)
		for k, v := range tc.extra {
			if nv[k] != v {
				t.Errorf("nvidia.%s = %v, want %v", k, nv[k], v)
			}
			delete(nv, k)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("rendered %+v:\n%s\nwant the chart's:\n%s", tc.v, data, fixture)
		}
	}
}
