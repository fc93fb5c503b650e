package helm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
)

// noWarnings is a logger that fails the test on any line: the chart's own
// configuration must hold no field the plugin ignores.
func noWarnings(t *testing.T) logr.Logger {
	return funcr.New(func(prefix, args string) { t.Errorf("plugin logged on the rendered config: %s %s", prefix, args) }, funcr.Options{})
}

func TestChartLint(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		values map[string]any
	}{
		{"defaults", nil},
		{"testbed", values("fakeDriver.enabled", true, "devicePlugin.privileged", false,
			"nodeConfig", []any{map[string]any{"name": "w2", "limitdelivery": "env"}})},
		{"env mode", values("devicePlugin.limitDelivery", "env", "monitor.enabled", false)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := lint.AllWithKubeVersionAndSchemaValidation(chartDir, tc.values, "kube-system", nil, false)
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %s", m)
				}
			}
		})
	}
}

// The ConfigMap is what the plugin reads: parse it with the plugin's own config package, strictly.
func TestChartDeviceConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		values    map[string]any
		node      string
		wantGlob  v1.LimitDelivery
		wantNode  v1.LimitDelivery // "" = no node override
		allowsPod bool
	}{
		{name: "default is file", wantGlob: v1.LimitDeliveryFile},
		{name: "global env", values: values("devicePlugin.limitDelivery", "env"), wantGlob: v1.LimitDeliveryEnv},
		{name: "node override", node: "w2", wantGlob: v1.LimitDeliveryFile, wantNode: v1.LimitDeliveryEnv,
			values: values("nodeConfig", []any{map[string]any{"name": "w2", "limitdelivery": "env", "devicesplitcount": 4}})},
		{name: "override names another node", node: "w1", wantGlob: v1.LimitDeliveryFile,
			values: values("nodeConfig", []any{map[string]any{"name": "w2", "limitdelivery": "env"}})},
		{name: "admin gate open", values: values("devicePlugin.allowPodLimitDeliveryOverride", true),
			wantGlob: v1.LimitDeliveryFile, allowsPod: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := render(t, tc.values)
			dc, err := v1.ParseDeviceConfig([]byte(r.cm.Data["device-config.yaml"]), noWarnings(t))
			if err != nil {
				t.Fatalf("plugin rejects the rendered device config: %v\n%s", err, r.cm.Data["device-config.yaml"])
			}
			pc, err := v1.ParsePluginConfig([]byte(r.cm.Data["config.json"]), noWarnings(t))
			if err != nil {
				t.Fatalf("plugin rejects the rendered config.json: %v\n%s", err, r.cm.Data["config.json"])
			}
			node := tc.node
			if node == "" {
				node = "any"
			}
			eff := v1.Resolve(dc, pc, node)
			if eff.GlobalLimitDelivery == nil || *eff.GlobalLimitDelivery != tc.wantGlob {
				t.Errorf("global limitDelivery = %s, want %s", deref(eff.GlobalLimitDelivery), tc.wantGlob)
			}
			switch {
			case tc.wantNode == "" && eff.NodeLimitDelivery != nil:
				t.Errorf("node %s: unexpected override %s", node, *eff.NodeLimitDelivery)
			case tc.wantNode != "" && (eff.NodeLimitDelivery == nil || *eff.NodeLimitDelivery != tc.wantNode):
				t.Errorf("node %s: limitdelivery = %s, want %s", node, deref(eff.NodeLimitDelivery), tc.wantNode)
			}
			if eff.AllowPodLimitDeliveryOverride != tc.allowsPod {
				t.Errorf("allowPodLimitDeliveryOverride = %v, want %v", eff.AllowPodLimitDeliveryOverride, tc.allowsPod)
			}
			if eff.ResourceCountName != "nvidia.com/gpu" {
				t.Errorf("resource name = %q", eff.ResourceCountName)
			}
		})
	}
}

func TestChartRejectsBadValues(t *testing.T) {
	t.Parallel()
	cases := map[string]map[string]any{
		"unknown delivery":      values("devicePlugin.limitDelivery", "files"),
		"unknown node key":      values("nodeConfig", []any{map[string]any{"name": "w2", "limitDelivery": "env"}}),
		"node entry no name":    values("nodeConfig", []any{map[string]any{"limitdelivery": "env"}}),
		"relative hook path":    values("global.gpuHookPath", "usr/local"),
		"unknown plugin value":  values("devicePlugin.limitdelivery", "env"),
		"bad fake profile name": values("fakeDriver.profile", "../etc/passwd"),
		"bad node profile name": values("fakeDriver.nodeProfiles", []any{map[string]any{"name": "w3", "profile": "a/b"}}),
		"bad node profile node": values("fakeDriver.nodeProfiles", []any{map[string]any{"name": "w3;x", "profile": "a100-mig"}}),
	}
	for name, vals := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := renderErr(t, vals)
			if err == nil {
				t.Fatalf("chart accepted %v", vals)
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") {
				t.Errorf("rejected for another reason than the schema: %v", err)
			}
		})
	}
}

// The plugin computes host paths inside its container, so the hook directory must be mounted at the
// same path; the installer and the monitor see the same directory.
func TestChartHostPaths(t *testing.T) {
	t.Parallel()
	for _, hook := range []string{"/usr/local", "/opt/hami"} {
		r := render(t, values("global.gpuHookPath", hook))
		want := hook + "/vgpu"
		for _, name := range []string{"install", "device-plugin", "vgpu-monitor", "vgpu-scheduler"} {
			c := r.container(t, name)
			if mp, hp := r.mountOf(t, c, "vgpu"); mp != want || hp != want {
				t.Errorf("hook %s: %s mounts vgpu host %q at %q, want %q at the same path", hook, name, hp, mp, want)
			}
		}
		dp := r.container(t, "device-plugin")
		if v, _ := arg(dp, "hook-path"); v != hook {
			t.Errorf("device plugin --hook-path = %q, want %q", v, hook)
		}
		for _, name := range []string{"vgpu-monitor", "vgpu-scheduler"} {
			if v, _ := arg(r.container(t, name), "hook-path"); v != hook {
				t.Errorf("%s --hook-path = %q, want %q", name, v, hook)
			}
		}
		if got := strings.Join(r.container(t, "install").Command, " "); !strings.HasSuffix(got, "install.sh "+want) {
			t.Errorf("install command = %q, want it to install into %s", got, want)
		}
		if mp, hp := r.mountOf(t, dp, "device-plugins"); mp != "/var/lib/kubelet/device-plugins" || hp != mp {
			t.Errorf("device-plugins dir host %q at %q", hp, mp)
		}
	}
}

func TestChartFakeDriver(t *testing.T) {
	t.Parallel()
	off := render(t, nil).container(t, "device-plugin")
	if _, ok := arg(off, "fake-driver"); ok {
		t.Errorf("fake driver enabled by default: %v", off.Args)
	}
	r := render(t, values("fakeDriver.enabled", true, "fakeDriver.profile", "a100-40g"))
	dp := r.container(t, "device-plugin")
	want := map[string]string{
		"fake-driver":           "true",
		"fake-driver-lib-dir":   "/usr/local/vgpu/fakegpu/lib",
		"fake-driver-profile":   "/usr/local/vgpu/fakegpu/profiles/a100-40g.profile",
		"fake-driver-state-dir": "/var/lib/fakegpu",
		"nvml-library":          "/usr/local/vgpu/fakegpu/lib/libnvidia-ml.so.1",
	}
	for k, v := range want {
		if got, _ := arg(dp, k); got != v {
			t.Errorf("--%s = %q, want %q", k, got, v)
		}
	}
	if v, _ := env(dp, "FAKEGPU_PROFILE"); v != want["fake-driver-profile"] {
		t.Errorf("FAKEGPU_PROFILE = %q", v)
	}
	if got := r.container(t, "install").Command; got[len(got)-1] != "/usr/local/vgpu/fakegpu" {
		t.Errorf("install command %v does not install fakegpu", got)
	}
}

// fakeDriver.nodeProfiles: the install init container copies each node's profile to
// node.profile, and the plugin reads that. The rendered script runs here (install.sh stubbed).
func TestChartFakeDriverNodeProfiles(t *testing.T) {
	t.Parallel()
	r := render(t, values("fakeDriver.enabled", true, "fakeDriver.profile", "a16-16q",
		"fakeDriver.nodeProfiles", []any{map[string]any{"name": "kind-worker3", "profile": "a100-mig"}}))
	dp := r.container(t, "device-plugin")
	const nodeProfile = "/usr/local/vgpu/fakegpu/node.profile"
	if got, _ := arg(dp, "fake-driver-profile"); got != nodeProfile {
		t.Errorf("--fake-driver-profile = %q, want %q", got, nodeProfile)
	}
	if v, _ := env(dp, "FAKEGPU_PROFILE"); v != nodeProfile {
		t.Errorf("FAKEGPU_PROFILE = %q, want %q", v, nodeProfile)
	}
	install := r.container(t, "install")
	if _, ok := env(install, "NODE_NAME"); !ok || len(install.Command) != 6 || install.Command[1] != "-c" ||
		install.Command[5] != "/usr/local/vgpu/fakegpu" {
		t.Fatalf("install container = %v %v", install.Command, install.Env)
	}
	script := strings.Replace(install.Command[2], `/bin/sh /k8s-vgpu/bin/install.sh "$1" "$2"`, "true", 1)
	if script == install.Command[2] {
		t.Fatalf("script does not run install.sh:\n%s", script)
	}
	fake := t.TempDir()
	if err := os.MkdirAll(filepath.Join(fake, "profiles"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a16-16q", "a100-mig"} {
		if err := os.WriteFile(filepath.Join(fake, "profiles", p+".profile"), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for node, want := range map[string]string{"kind-worker3": "a100-mig", "kind-worker": "a16-16q"} {
		cmd := exec.Command("/bin/sh", "-c", script, "install", "/nonexistent", fake)
		cmd.Env = append(os.Environ(), "NODE_NAME="+node)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", node, err, out)
		}
		if got, err := os.ReadFile(filepath.Join(fake, "node.profile")); err != nil || string(got) != want {
			t.Errorf("%s: node.profile = %q (%v), want %s", node, got, err, want)
		}
	}
}

// The compute scheduler: on by default, the plugin then gives containers their grant files; off,
// neither the container nor the plugin flag.
func TestChartScheduler(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		r := render(t, values("scheduler.enabled", on))
		if v, _ := arg(r.container(t, "device-plugin"), "compute-scheduler"); v != fmt.Sprint(on) {
			t.Errorf("scheduler.enabled=%v: plugin --compute-scheduler=%q", on, v)
		}
		found := false
		for _, c := range r.ds.Spec.Template.Spec.Containers {
			found = found || c.Name == "vgpu-scheduler"
		}
		if found != on {
			t.Errorf("scheduler.enabled=%v: vgpu-scheduler container present %v", on, found)
		}
	}
}

// Every flag the chart passes must be one the binaries define: build them and read their -h.
func TestChartFlagsMatchBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin binaries")
	}
	t.Parallel()
	r := render(t, values("fakeDriver.enabled", true, "monitor.gracePeriod", "1m",
		"devicePlugin.extraArgs", []any{}, "monitor.extraArgs", []any{}, "scheduler.extraArgs", []any{}))
	bin := t.TempDir()
	root := repoRoot(t)
	build := exec.Command("go", "build", "-trimpath", "-o", bin+"/", "./plugin/cmd/vgpu-device-plugin", "./plugin/cmd/vgpu-monitor",
		"./plugin/cmd/vgpu-scheduler")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build plugin binaries: %v\n%s", err, out)
	}
	for ctr, binary := range map[string]string{"device-plugin": "vgpu-device-plugin", "vgpu-monitor": "vgpu-monitor",
		"vgpu-scheduler": "vgpu-scheduler"} {
		out, _ := exec.Command(filepath.Join(bin, binary), "-h").CombinedOutput() // -h exits non-zero
		for _, a := range r.container(t, ctr).Args {
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !strings.Contains(string(out), "  -"+name+" ") && !strings.Contains(string(out), "  -"+name+"\n") {
				t.Errorf("%s passes --%s, which %s does not define:\n%s", ctr, name, binary, out)
			}
		}
	}
}

func deref(d *v1.LimitDelivery) string {
	if d == nil {
		return "<unset>"
	}
	return string(*d)
}
