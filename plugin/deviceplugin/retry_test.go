package deviceplugin_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limitbed/limitbed/plugin/annotations"
)

// A kubelet restart after the placement was claimed (bind-phase success, the lock released) and
// before the answer reached the kubelet: the kubelet asks again for the same container with the
// same devices and gets the same answer, and nothing is claimed again (docs/trust-model.md).
// Before: the retry was refused (no pod is being bound) and the pod failed admission.
//
// Around it: a call for the same devices while the node lock names another pod may be that pod's
// and is refused without marking anybody; that pod's own call is allocated as ever; once the
// container started, its devices are never answered again.
func TestAllocateRetryAfterTheClaimGetsTheSameAnswer(t *testing.T) {
	e := setup(t, nil, lockOn("p"), mkPod("p", 1, "GPU-a,NVIDIA,1000,0:;", nil, gpuCtr("main", 1000)))
	first, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0")
	if err != nil {
		t.Fatal(err)
	}
	claimed := e.pod("default", "p")
	if claimed.Annotations[annotations.BindPhase] != "success" {
		t.Fatalf("phase %q", claimed.Annotations[annotations.BindPhase])
	}
	if err := e.kl.Restart(); err != nil { // the answer never reached the kubelet
		t.Fatal(err)
	}
	e.reconnect()
	again, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0")
	if err != nil {
		t.Fatalf("the kubelet's retry after the claim: %v", err)
	}
	if !proto.Equal(first, again) {
		t.Errorf("the retry got another answer:\n%v\nfirst:\n%v", again, first)
	}
	if p := e.pod("default", "p"); p.ResourceVersion != claimed.ResourceVersion {
		t.Errorf("the retry changed the pod: %v", p.Annotations)
	}
	if v := e.limits("uid-p_main"); v["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
		t.Errorf("file = %v", v)
	}

	// The scheduler binds q on the same GPU: a call for p's devices may now be q's (the kubelet
	// gives p's devices to another pod only once it lost p's allocation).
	q := mkPod("q", 2, "GPU-a,NVIDIA,2000,0:;", nil, gpuCtr("main", 2000))
	if _, err := e.kube.CoreV1().Pods("default").Create(e.ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kube.CoreV1().Nodes().Update(e.ctx, lockOn("q"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0"); err == nil || !strings.Contains(err.Error(), "may be either pod's") {
		t.Errorf("p's devices while the lock names q: %v", err)
	}
	if ph := e.pod("default", "q").Annotations[annotations.BindPhase]; ph != "allocating" {
		t.Errorf("q marked %q by a call that may be p's", ph)
	}
	r, err := e.plugin.AllocateOne(e.ctx, "GPU-a-1")
	if err != nil || r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "2000m" {
		t.Fatalf("q's own call: %v, %v", r, err)
	}

	// p's container started: its devices are not answered again.
	p := e.pod("default", "p")
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", ContainerID: "containerd://1234"}}
	if _, err := e.kube.CoreV1().Pods("default").UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0"); err == nil {
		t.Errorf("a started container's devices were answered again: %v", r)
	}
}

// A pod of two containers on one GPU: the first is claimed, the kubelet restarts before it
// receives the answer and asks for the first container again. It gets the first container's
// answer, never the second container's entry (a second, different claim); the second container's
// own call then gets its entry. Before: the retry was handed the second container's placement.
func TestAllocateRetryNeverClaimsTheNextEntry(t *testing.T) {
	e := setup(t, nil, mkPod("p", 1, "GPU-a,NVIDIA,1000,0:;GPU-a,NVIDIA,2000,0:;", nil, corev1.Container{Name: "one"}, corev1.Container{Name: "two"}))
	first, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.kl.Restart(); err != nil {
		t.Fatal(err)
	}
	e.reconnect()
	again, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0")
	if err != nil || !proto.Equal(first, again) {
		t.Fatalf("the retry of container one: %v, %v; want %v", again, err, first)
	}
	if p := e.pod("default", "p"); p.Annotations[annotations.DevicesToAllocate] != ";GPU-a,NVIDIA,2000,0:;" ||
		p.Annotations[annotations.BindPhase] != "allocating" {
		t.Fatalf("after the retry: %v", p.Annotations)
	}
	two, err := e.plugin.AllocateOne(e.ctx, "GPU-a-1")
	if err != nil || two.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "2000m" {
		t.Fatalf("container two: %v, %v", two, err)
	}
	if v := e.limits("uid-p_one"); v["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
		t.Errorf("file of one = %v", v)
	}
}
