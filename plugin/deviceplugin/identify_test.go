package deviceplugin_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/limitbed/limitbed/harness/fakeapi"
	"github.com/limitbed/limitbed/plugin/allocate"
	"github.com/limitbed/limitbed/plugin/annotations"
	"github.com/limitbed/limitbed/plugin/deviceplugin"
)

// The pod is the one the scheduler's node lock names; kubelet's devices must
// be the GPUs its next entry places. When they are not, the error names what
// was scheduled and what kubelet asked for, and the pod is marked failed with
// an Event (it cannot be served), as upstream does on a device mismatch.
func TestAllocateDevicesMustMatchTheLockedPod(t *testing.T) {
	for _, tc := range []struct {
		name, devs string
		ids        []string
		want       string
	}{
		{"another GPU", "GPU-a,NVIDIA,1000,10:;", []string{"GPU-b-0"}, "devices not matched: scheduled [GPU-a], kubelet asked for [GPU-b]"},
		{"another count", "GPU-a,NVIDIA,1000,10:GPU-b,NVIDIA,1000,10:;", []string{"GPU-b-0"}, "device number not matched: 2 scheduled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, nil, mkPod("p", 1, tc.devs, nil))
			_, err := e.plugin.AllocateOne(e.ctx, tc.ids...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if ph := e.pod("default", "p").Annotations[annotations.BindPhase]; ph != "failed" {
				t.Fatalf("phase = %s, want failed", ph)
			}
			if w := e.warnings(tc.want); len(w) != 1 {
				t.Fatalf("events = %v", e.events.events)
			}
			e.noLimits("uid-p_main")
		})
	}
}

// Once the pod the lock names has succeeded, the plugin releases the lock
// for the scheduler's next bind; a later call with no lock is refused.
func TestAllocateReleasesTheLock(t *testing.T) {
	e := setup(t, nil, mkPod("p", 1, "GPU-a,NVIDIA,2000,20:;", nil))
	if _, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0"); err != nil {
		t.Fatal(err)
	}
	n, err := e.client.CoreV1().Nodes().Get(e.ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := n.Annotations[annotations.NodeLock]; ok {
		t.Fatalf("node lock %q still held after pod p succeeded", l)
	}
	if _, err := e.plugin.AllocateOne(e.ctx, "GPU-a-1"); err == nil || !strings.Contains(err.Error(), "no hami.io/mutex.lock") {
		t.Fatalf("a call with no pod placed: err = %v", err)
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

// Concurrent calls for the containers of one pod, against an API server with
// optimistic concurrency (harness/fakeapi): no lock is held across the API
// calls, so calls race to claim entries; the claim's resourceVersion makes
// each entry go to exactly one call. Every container ends with its own
// limits in its own file and the pod with bind-phase success. Each call has
// devices of its own, as the kubelet's calls have (it hands a device to one
// container at a time; the same devices again are a retry: retry_test.go).
func TestConcurrentAllocatesClaimEachEntryOnce(t *testing.T) {
	const n = 16
	s, err := fakeapi.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	var ctrs []corev1.Container
	var devs annotations.PodDevices
	for i := range n {
		ctrs = append(ctrs, corev1.Container{Name: fmt.Sprintf("c%02d", i)})
		devs = append(devs, annotations.ContainerDevices{{UUID: "GPU-a", Type: "NVIDIA", UsedMem: int32(100 + i), UsedCores: int32(i + 1)}})
	}
	if err := s.AddNode(lockOn("p")); err != nil {
		t.Fatal(err)
	}
	if err := s.AddPod(mkPod("p", 1, devs.Encode(), nil, ctrs...)); err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(s.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Every round of the race has one winner and redoes the others' host files: a generous
	// deadline, so a loaded CI machine under -race judges correctness, not speed.
	e := setupKube(t, func(o *deviceplugin.Options, _ *allocate.Options) { o.APITimeout, o.SplitCount = 2*time.Minute, n }, kube)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.plugin.AllocateOne(e.ctx, fmt.Sprintf("GPU-a-%d", i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	p := e.pod("default", "p")
	if p.Annotations[annotations.BindPhase] != "success" || p.Annotations[annotations.DevicesToAllocate] != strings.Repeat(";", n) {
		t.Fatalf("annotations = %v", p.Annotations)
	}
	for i := range n {
		v := e.limits(fmt.Sprintf("uid-p_c%02d", i))
		if v["CUDA_DEVICE_MEMORY_LIMIT_0"] != fmt.Sprintf("%dm", 100+i) || v["CUDA_DEVICE_SM_LIMIT"] != fmt.Sprint(i+1) {
			t.Errorf("container c%02d file = %v", i, v)
		}
	}
}
