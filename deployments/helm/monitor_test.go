package helm

import (
	"testing"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
)

// The monitor's driver-truth accounting as the chart deploys it: the node's PID namespace, the
// configuration (enforcement, globally and per node), its period and allowance, and in fake-driver
// mode fakegpu's NVML reading the node's state through a profile named as the containers' is.
func TestChartMonitorDriverTruth(t *testing.T) {
	t.Parallel()
	r := render(t, values("fakeDriver.enabled", true, "monitor.enforcement", "kill", "monitor.accountingInterval", "2s",
		"monitor.contextAllowance", "600m", "nodeConfig", []any{map[string]any{"name": "w2", "enforcement": "report"}}))
	if !r.ds.Spec.Template.Spec.HostPID {
		t.Error("the DaemonSet's pods do not share the node's PID namespace")
	}
	m := r.container(t, "vgpu-monitor")
	for k, want := range map[string]string{"accounting-interval": "2s", "context-allowance": "600m",
		"device-config-file": "/config/device-config.yaml", "node-config-file": "/config/config.json",
		"nvml-library": "/usr/local/vgpu/fakegpu/lib/libnvidia-ml.so.1"} {
		if got, _ := arg(m, k); got != want {
			t.Errorf("--%s = %q, want %q", k, got, want)
		}
	}
	if v, _ := env(m, "FAKEGPU_PROFILE"); v != "/etc/fakegpu/profile" {
		t.Errorf("FAKEGPU_PROFILE = %q", v)
	}
	if v, ok := env(m, "FAKEGPU_NVML_STALE_MS"); ok {
		t.Errorf("FAKEGPU_NVML_STALE_MS = %q by default", v)
	}
	stale := render(t, values("fakeDriver.enabled", true, "fakeDriver.nvmlStaleMs", 4000)).container(t, "vgpu-monitor")
	if v, _ := env(stale, "FAKEGPU_NVML_STALE_MS"); v != "4000" {
		t.Errorf("fakeDriver.nvmlStaleMs 4000: FAKEGPU_NVML_STALE_MS = %q", v)
	}
	profileMount := func(r rendered) string {
		for _, vm := range r.container(t, "vgpu-monitor").VolumeMounts {
			if vm.MountPath == "/etc/fakegpu/profile" && vm.Name == "vgpu" {
				return vm.SubPath
			}
		}
		return ""
	}
	if sub := profileMount(r); sub != "fakegpu/profiles/a16-16q.profile" {
		t.Errorf("profile mounted from subPath %q of the vgpu volume", sub)
	}
	nodeProfiles := render(t, values("fakeDriver.enabled", true, "fakeDriver.nodeProfiles", []any{map[string]any{"name": "w3", "profile": "a100-mig"}}))
	if sub := profileMount(nodeProfiles); sub != "fakegpu/node.profile" {
		t.Errorf("with nodeProfiles the profile is mounted from subPath %q", sub)
	}
	if mp, hp := r.mountOf(t, m, "fakegpu-state"); mp != "/var/lib/fakegpu" || hp != mp {
		t.Errorf("state %q mounted at %q", hp, mp)
	}
	if mp, _ := r.mountOf(t, m, "config"); mp != "/config" {
		t.Errorf("config at %q", mp)
	}
	dc, err := v1.ParseDeviceConfig([]byte(r.cm.Data["device-config.yaml"]), noWarnings(t))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := v1.ParsePluginConfig([]byte(r.cm.Data["config.json"]), noWarnings(t))
	if err != nil {
		t.Fatal(err)
	}
	if e := v1.Resolve(dc, pc, "w1").Enforcement; e != v1.EnforcementKill {
		t.Errorf("w1 enforcement %q, want kill", e)
	}
	if e := v1.Resolve(dc, pc, "w2").Enforcement; e != v1.EnforcementReport {
		t.Errorf("w2 enforcement %q, want report (its node entry)", e)
	}
	if e := v1.Resolve(mustParse(t, render(t, nil).cm.Data["device-config.yaml"]), nil, "x").Enforcement; e != v1.EnforcementReport {
		t.Errorf("default enforcement %q, want report", e)
	}
	if _, err := renderErr(t, values("monitor.enforcement", "shoot")); err == nil {
		t.Error("enforcement shoot rendered")
	}
}

func mustParse(t *testing.T, s string) *v1.DeviceConfig {
	t.Helper()
	dc, err := v1.ParseDeviceConfig([]byte(s), noWarnings(t))
	if err != nil {
		t.Fatal(err)
	}
	return dc
}
