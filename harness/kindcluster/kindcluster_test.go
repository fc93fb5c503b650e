package kindcluster

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"

	"github.com/limitbed/limitbed/plugin/annotations"
)

func TestKindConfig(t *testing.T) {
	t.Parallel()
	workers := []Worker{
		{Labels: map[string]string{"limitbed.io/gpu": "true"}, Mounts: []Mount{{HostPath: "/tmp/a", ContainerPath: "/var/lib/fakegpu"}}},
		{Labels: map[string]string{"limitbed.io/delivery": "env"}},
	}
	for _, cgroupV1 := range []bool{false, true} {
		cfg := kindConfig(NodeImage{Ref: "limitbed/kind-node:v1.37.2-x", Offline: true}, workers, cgroupV1)
		if len(cfg.Nodes) != 3 || cfg.Nodes[0].Role != v1alpha4.ControlPlaneRole {
			t.Fatalf("nodes = %+v, want a control plane and 2 workers", cfg.Nodes)
		}
		for i, n := range cfg.Nodes {
			if n.Image != "limitbed/kind-node:v1.37.2-x" {
				t.Errorf("node %d image %q", i, n.Image)
			}
		}
		if w := cfg.Nodes[1]; w.Role != v1alpha4.WorkerRole || w.Labels["limitbed.io/gpu"] != "true" ||
			len(w.ExtraMounts) != 1 || w.ExtraMounts[0].ContainerPath != "/var/lib/fakegpu" {
			t.Errorf("worker 0 = %+v", w)
		}
		if got := len(cfg.KubeadmConfigPatches) == 1 && strings.Contains(cfg.KubeadmConfigPatches[0], "failCgroupV1: false"); got != cgroupV1 {
			t.Errorf("cgroupV1=%v: patches %q", cgroupV1, cfg.KubeadmConfigPatches)
		}
	}
}

func TestWorkerName(t *testing.T) {
	t.Parallel()
	for i, want := range []string{"c-worker", "c-worker2", "c-worker3"} {
		if got := workerName("c", i); got != want {
			t.Errorf("workerName(c, %d) = %q, want %q", i, got, want)
		}
	}
}

func TestBindWritesHAMiAnnotations(t *testing.T) {
	t.Parallel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init"}},
			Containers:     []corev1.Container{{Name: "a"}, {Name: "b"}},
		},
	}
	kube := fake.NewClientset(pod, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	devs := annotations.PodDevices{nil, {{UUID: "GPU-1", Type: "NVIDIA", UsedMem: 3000, UsedCores: 30}}, nil}
	before := time.Now().Unix()
	if err := Bind(context.Background(), kube, pod, "node-1", devs); err != nil {
		t.Fatal(err)
	}
	got, err := kube.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := got.Annotations
	want := ";GPU-1,NVIDIA,3000,30:;;"
	if a[annotations.DevicesToAllocate] != want || a[annotations.DevicesAllocated] != want {
		t.Errorf("device annotations = %q / %q, want %q", a[annotations.DevicesToAllocate], a[annotations.DevicesAllocated], want)
	}
	if a[annotations.VGPUNode] != "node-1" || a[annotations.BindPhase] != "allocating" {
		t.Errorf("node/phase annotations = %q / %q", a[annotations.VGPUNode], a[annotations.BindPhase])
	}
	if bt, err := strconv.ParseInt(a[annotations.BindTime], 10, 64); err != nil || bt < before {
		t.Errorf("bind-time = %q", a[annotations.BindTime])
	}
	var bound bool
	for _, act := range kube.Actions() {
		if c, ok := act.(k8stesting.CreateAction); ok && act.GetSubresource() == "binding" {
			b := c.GetObject().(*corev1.Binding)
			bound = b.Target.Name == "node-1" && b.Name == "p"
		}
	}
	if !bound {
		t.Errorf("no binding of p to node-1 in %v", kube.Actions())
	}
	n, err := kube.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lock := n.Annotations[annotations.NodeLock]; !holds(lock, "ns", "p") {
		t.Errorf("node lock = %q, want it held by ns/p", lock)
	}
	if err := Bind(context.Background(), kube, pod, "node-1", devs[:2]); err == nil {
		t.Error("Bind accepted 2 device entries for 3 containers")
	}
}

// holds reports whether the node lock value names pod namespace/name.
func holds(lock, namespace, name string) bool {
	h, err := annotations.ParseNodeLock(lock)
	return err == nil && h.Names(namespace, name)
}
