package deviceplugin_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/limitbed/limitbed/plugin/annotations"
)

// Kubelet's device IDs decide the pod, not the bind order: the newer pod's
// GPU asked for first gets the newer pod's limits, and the older pod keeps
// its entry for its own Allocate. (The oldest-first lookup gave pod "old"'s
// 1000 MiB to the container that asked for GPU-b.)
func TestAllocateIdentifiesPodByDevices(t *testing.T) {
	e := setup(t, nil, mkPod("old", 1, "GPU-a,NVIDIA,1000,10:;", nil), mkPod("new", 2, "GPU-b,NVIDIA,2000,20:;", nil))
	if _, err := e.plugin.AllocateOne(e.ctx, "GPU-b-0"); err != nil {
		t.Fatal(err)
	}
	if v := e.limits("uid-new_main"); v["CUDA_DEVICE_MEMORY_LIMIT_0"] != "2000m" {
		t.Fatalf("GPU-b's container got %v, want pod new's 2000m", v)
	}
	e.noLimits("uid-old_main")
	if ph := e.pod("default", "old").Annotations[annotations.BindPhase]; ph != "allocating" {
		t.Fatalf("pod old phase = %s, want still allocating", ph)
	}
	if _, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0"); err != nil {
		t.Fatal(err)
	}
	if v := e.limits("uid-old_main"); v["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
		t.Fatalf("GPU-a's container got %v, want pod old's 1000m", v)
	}
	for _, name := range []string{"old", "new"} {
		if ph := e.pod("default", name).Annotations[annotations.BindPhase]; ph != "success" {
			t.Errorf("pod %s phase = %s", name, ph)
		}
	}
}

// Nothing matches: the error names every candidate and what it waits for,
// and no pod is marked failed (it may still get its own Allocate).
func TestAllocateNoPodMatches(t *testing.T) {
	e := setup(t, nil, mkPod("p1", 1, "GPU-a,NVIDIA,1000,10:;", nil), mkPod("p2", 2, "GPU-a,NVIDIA,1000,10:GPU-b,NVIDIA,1000,10:;", nil))
	_, err := e.plugin.AllocateOne(e.ctx, "GPU-b-0")
	for _, want := range []string{"match no allocating pod", "pod default/p1: devices not matched: scheduled [GPU-a]", "pod default/p2: device number not matched"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want it to contain %q", err, want)
		}
	}
	for _, name := range []string{"p1", "p2"} {
		if ph := e.pod("default", name).Annotations[annotations.BindPhase]; ph != "allocating" {
			t.Errorf("pod %s phase = %s, want allocating", name, ph)
		}
	}
}

// Two pods waiting on replicas of the same GPU are indistinguishable by
// devices; the node's hami.io/mutex.lock (the scheduler's bind lock) names
// the one being bound, and it goes first even though it is newer; once it
// succeeds the plugin releases the lock.
func TestAllocateNodeLockOrder(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Annotations: map[string]string{annotations.NodeLock: "2026-12-01T08:00:00Z,default,new"}}}
	e := setup(t, nil, n, mkPod("old", 1, "GPU-a,NVIDIA,1000,10:;", nil), mkPod("new", 2, "GPU-a,NVIDIA,2000,20:;", nil))
	if _, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0"); err != nil {
		t.Fatal(err)
	}
	if v := e.limits("uid-new_main"); v["CUDA_DEVICE_MEMORY_LIMIT_0"] != "2000m" {
		t.Fatalf("locked pod new: %v", v)
	}
	e.noLimits("uid-old_main")
	// Pod new is done: its lock is released for the scheduler's next bind.
	got, err := e.kube.CoreV1().Nodes().Get(e.ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := got.Annotations[annotations.NodeLock]; ok {
		t.Fatalf("node lock %q still held after pod new succeeded", l)
	}
}

// An ID the plugin does not advertise (it cannot say whether it is a MIG
// device or a GPU) fails the allocation before any pod is touched; so does
// a request mixing a MIG device with a GPU.
func TestAllocateUnknownDeviceID(t *testing.T) {
	e := setup(t, nil, mkPod("p", 1, "GPU-a,NVIDIA,1000,10:;", nil))
	for _, ids := range [][]string{{"GPU-z-0"}, {"MIG-GPU-a-0"}, {"GPU-a-0", "GPU-a-MIG"}} {
		_, err := e.plugin.AllocateOne(e.ctx, ids...)
		if err == nil || !strings.Contains(err.Error(), "is not one this plugin advertises") {
			t.Fatalf("%v: err = %v", ids, err)
		}
	}
	if ph := e.pod("default", "p").Annotations[annotations.BindPhase]; ph != "allocating" {
		t.Fatalf("phase = %s, want allocating", ph)
	}
	e.noLimits("uid-p_main")
}

// Concurrent binds on one node: pods on two GPUs, every Allocate fired at
// once with its own pod's GPU, in no particular order. Each pod ends up with
// its own limits, and every response carries the limits of a pod scheduled
// on the GPU kubelet gave (oldest-first alone handed GPU-b requests GPU-a
// pods); those on one GPU are served oldest first.
func TestConcurrentBindsTwoGPUs(t *testing.T) {
	const n = 40
	var objs []runtime.Object
	gpuOf := func(i int) string { return []string{"GPU-a", "GPU-b"}[i%2] }
	for i := range n {
		objs = append(objs, mkPod(fmt.Sprintf("p%02d", i), i, fmt.Sprintf("%s,NVIDIA,%d,%d:;", gpuOf(i), 100+i, i), nil))
	}
	e := setup(t, nil, objs...)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := n - 1; i >= 0; i-- {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.plugin.AllocateOne(e.ctx, gpuOf(i)+"-0")
			if err != nil {
				errs <- err
				return
			}
			// The response is for a pod scheduled on the GPU kubelet gave.
			var mib int
			if _, err := fmt.Sscanf(r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"], "%dm", &mib); err != nil || r.Envs["NVIDIA_VISIBLE_DEVICES"] != gpuOf(i) || gpuOf(mib-100) != gpuOf(i) {
				errs <- fmt.Errorf("request for %s got envs %v: another GPU's pod", gpuOf(i), r.Envs)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range n {
		name := fmt.Sprintf("p%02d", i)
		if ph := e.pod("default", name).Annotations[annotations.BindPhase]; ph != "success" {
			t.Errorf("%s phase = %s", name, ph)
		}
		if v := e.limits("uid-" + name + "_main"); v["CUDA_DEVICE_MEMORY_LIMIT_0"] != fmt.Sprintf("%dm", 100+i) {
			t.Errorf("%s file = %v", name, v)
		}
	}
}
