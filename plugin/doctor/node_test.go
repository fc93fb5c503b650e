package doctor

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func (w *world) node() *corev1.Node {
	for _, o := range w.objects {
		if n, ok := o.(*corev1.Node); ok {
			return n
		}
	}
	panic("no node")
}

func (w *world) pluginPod() *corev1.Pod {
	for _, o := range w.objects {
		if p, ok := o.(*corev1.Pod); ok && p.Namespace == pluginNS {
			return p
		}
	}
	panic("no plugin pod")
}

func TestHealthyNodePasses(t *testing.T) {
	w := healthy(hamiRegion(t))
	rep, err := w.doctor().Node(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	_ = rep.WriteText(&text)
	want := []string{"plugin", "library", "limits-files", "monitor", "driver-truth"}
	if len(rep.Checks) != len(want) {
		t.Fatalf("%d checks, want %d:\n%s", len(rep.Checks), len(want), text.String())
	}
	for i, c := range rep.Checks {
		if c.Name != want[i] || c.Verdict != OK {
			t.Errorf("check %d = %s %s, want %s ok:\n%s", i, c.Name, c.Verdict, want[i], text.String())
		}
	}
	if !strings.Contains(text.String(), "1 limits files") || !strings.Contains(text.String(), "limits of 1 containers") ||
		!strings.Contains(text.String(), "team/train/main on GPU-3c5a: driver 1300 MiB, region 1000 MiB, limit with allowance 4024 MiB") {
		t.Errorf("report:\n%s", text.String())
	}
}

func TestNodeFaultIsNamed(t *testing.T) {
	const containers = "/usr/local/vgpu/containers/"
	cases := []struct {
		name    string
		plant   func(w *world)
		check   string
		verdict Verdict
		mention string
	}{
		{"plugin not ready", func(w *world) { w.pluginPod().Status.ContainerStatuses[0].Ready = false }, "plugin", Fail, "is not ready"},
		{"not registered", func(w *world) {
			w.node().Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("0")}
		},
			"plugin", Fail, "registration failed"},
		{"no plugin pod", func(w *world) { w.pluginPod().Spec.NodeName = "other" }, "plugin", Fail, "no pod in namespace limitbed-system on node gpu-1"},
		{"library not installed", func(w *world) { delete(w.plugin.files, "/usr/local/vgpu/libvgpu.so") }, "library", Fail, "is not installed"},
		{"preload not installed", func(w *world) { delete(w.plugin.files, "/usr/local/vgpu/ld.so.preload") }, "library", Fail, "ld.so.preload is missing"},
		{"orphan limits file", func(w *world) { w.plugin.files[containers+"5c1e0000-dead_main.limits"] = []byte(limitsFile) },
			"limits-files", Warn, "orphans: 5c1e0000-dead_main.limits"},
		{"interrupted write", func(w *world) { w.plugin.files[containers+"."+podUID+"_main.limits.tmp-x1"] = nil },
			"limits-files", Warn, ".tmp-x1"},
		{"live container without its file", func(w *world) { delete(w.plugin.files, containers+podUID+"_main.limits") },
			"limits-files", Fail, podUID + "_main.limits"},
		{"containers dir unreadable", func(w *world) { w.plugin.noLs = true }, "limits-files", Fail, "cannot list"},
		{"monitor not ready", func(w *world) { w.pluginPod().Status.ContainerStatuses[1].Ready = false }, "monitor", Fail, "vgpu-monitor container"},
		{"monitor misses a container", func(w *world) { w.metrics = "# no samples\n" }, "monitor", Fail, "exports no limit for " + podUID + "_main"},
		{"metrics unreachable", func(w *world) { w.pluginPod().Spec.Containers[1].Args = []string{"--metrics-address=:9999"} },
			"monitor", Warn, "port-forward limitbed-x7k2p 9999"},
		{"over its limit by the driver's count", func(w *world) {
			w.metrics = strings.Replace(w.metrics, driverMetrics(1300, "yes", 0), driverMetrics(5696, "yes", 1), 1)
		},
			"driver-truth", Fail, "team/train/main on GPU-3c5a (driver 5696 MiB, limit with allowance 4024 MiB)"},
		{"a process the library does not see", func(w *world) {
			w.metrics = strings.Replace(w.metrics, driverMetrics(1300, "yes", 0), driverMetrics(2000, "no", 0), 1)
		},
			"driver-truth", Fail, "pid 4242 on GPU-3c5a holds 2000 MiB in team/train/main"},
		{"a process of no known container", func(w *world) {
			w.metrics += `hami_driver_process_memory_bytes{container="",gpu_uuid="GPU-3c5a",in_region="",pid="99",pod_uid=""} 5.24288e+08` + "\n"
		}, "driver-truth", Warn, "pid 99 on GPU-3c5a holds 500 MiB"},
		{"no driver-truth accounting", func(w *world) { w.metrics = strings.ReplaceAll(w.metrics, "hami_monitor_driver_last_pass", "x") },
			"driver-truth", Warn, "--accounting-interval=0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := healthy(hamiRegion(t))
			tc.plant(w)
			rep, err := w.doctor().Node(context.Background(), node)
			if err != nil {
				t.Fatal(err)
			}
			var text bytes.Buffer
			_ = rep.WriteText(&text)
			c, ok := rep.Check(tc.check)
			if !ok || c.Verdict != tc.verdict || !strings.Contains(c.Detail+" "+c.Cause+" "+c.Fix, tc.mention) {
				t.Fatalf("%s = %+v, want %s naming %q:\n%s", tc.check, c, tc.verdict, tc.mention, text.String())
			}
			if rep.Failed() != (tc.verdict == Fail) {
				t.Fatalf("failed = %v:\n%s", rep.Failed(), text.String())
			}
		})
	}
}

func TestUnknownNode(t *testing.T) {
	w := healthy(hamiRegion(t))
	if _, err := w.doctor().Node(context.Background(), "nope"); err == nil || !strings.Contains(err.Error(), "node nope") {
		t.Fatalf("err = %v", err)
	}
}
