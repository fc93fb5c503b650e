package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/limitbed/limitbed/harness/fakeapi"
	"github.com/limitbed/limitbed/plugin/annotations"
)

func newAPI(t *testing.T, lock string, pods ...*corev1.Pod) (*fakeapi.Server, kubernetes.Interface) {
	t.Helper()
	s, err := fakeapi.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	if lock != "" {
		n.Annotations = map[string]string{annotations.NodeLock: lock}
	}
	if err := s.AddNode(n); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if err := s.AddPod(p); err != nil {
			t.Fatal(err)
		}
	}
	kube, err := kubernetes.NewForConfig(s.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return s, kube
}

func gpuPod(name, phase string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main"}}},
	}
	if phase != "" {
		p.Annotations = map[string]string{annotations.BindPhase: phase}
	}
	return p
}

// TestLock: a free node is locked for the pod; a lock whose owner is still allocating is waited for
// and then reported; a lock whose owner finished, is gone, or that expired is taken over.
func TestLock(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		lock   string
		owner  *corev1.Pod
		taken  bool
		errHas string
	}{
		{name: "free", taken: true},
		{name: "owner allocating", lock: LockValue(now, gpuPod("other", "")), owner: gpuPod("other", "allocating"),
			errHas: "still allocating"},
		{name: "owner succeeded", lock: LockValue(now, gpuPod("other", "")), owner: gpuPod("other", "success"), taken: true},
		{name: "owner failed", lock: LockValue(now, gpuPod("other", "")), owner: gpuPod("other", "failed"), taken: true},
		{name: "owner gone", lock: LockValue(now, gpuPod("gone", "")), taken: true},
		{name: "expired", lock: LockValue(now.Add(-LockExpiry-time.Minute), gpuPod("other", "")), owner: gpuPod("other", "allocating"), taken: true},
		{name: "legacy timestamp", lock: now.UTC().Format(time.RFC3339), errHas: "without an owner"},
		{name: "own lock", lock: LockValue(now, gpuPod("me", "")), taken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			me := gpuPod("me", "")
			pods := []*corev1.Pod{me}
			if tc.owner != nil {
				pods = append(pods, tc.owner)
			}
			s, kube := newAPI(t, tc.lock, pods...)
			err := Lock(context.Background(), kube, "n1", me, 200*time.Millisecond)
			n, _ := s.Node("n1")
			got := n.Annotations[annotations.NodeLock]
			if tc.taken {
				if err != nil || !strings.HasSuffix(got, ",default,me") {
					t.Fatalf("Lock = %v, lock %q; want it taken by default/me", err, got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) || got != tc.lock {
				t.Fatalf("Lock = %v, lock %q; want an error naming %q and the lock unchanged", err, got, tc.errHas)
			}
		})
	}
}

// TestLockExclusive: schedulers racing for one node each get it in turn, never two at once: every
// writer carries the resourceVersion it read, the loser of a race gets 409 and reads again.
func TestLockExclusive(t *testing.T) {
	const n = 6
	var pods []*corev1.Pod
	for i := range n {
		pods = append(pods, gpuPod(string(rune('a'+i)), ""))
	}
	s, kube := newAPI(t, "", pods...)
	ctx := context.Background()
	var (
		mu      sync.Mutex
		holders int
		wg      sync.WaitGroup
		errs    = make(chan error, n)
	)
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Lock(ctx, kube, "n1", p, 20*time.Second); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			holders++
			if holders > 1 {
				errs <- errors.New("two holders at once")
			}
			mu.Unlock()
			node, _ := s.Node("n1")
			if h, err := annotations.ParseNodeLock(node.Annotations[annotations.NodeLock]); err != nil || !h.Names(p.Namespace, p.Name) {
				errs <- fmt.Errorf("lock %q while %s holds it", node.Annotations[annotations.NodeLock], p.Name)
			}
			time.Sleep(10 * time.Millisecond)
			mu.Lock()
			holders--
			mu.Unlock()
			if err := Release(ctx, kube, "n1", p); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if node, _ := s.Node("n1"); node.Annotations[annotations.NodeLock] != "" {
		t.Fatalf("lock %q left after every holder released it", node.Annotations[annotations.NodeLock])
	}
}

// TestBindNoBinding: Bind on an API server without the binding subresource writes the lock and every
// scheduler annotation; a wrong number of device entries is refused before anything is written.
func TestBindNoBinding(t *testing.T) {
	me := gpuPod("me", "")
	s, kube := newAPI(t, "", me)
	devs := annotations.PodDevices{{{UUID: "GPU-1", Type: "NVIDIA", UsedMem: 3000}}}
	if err := Bind(context.Background(), kube, me, "n1", annotations.PodDevices{nil, nil}, Options{NoBinding: true}); err == nil {
		t.Fatal("Bind accepted 2 device entries for 1 container")
	}
	if n, _ := s.Node("n1"); n.Annotations[annotations.NodeLock] != "" {
		t.Fatalf("refused Bind left a lock %q", n.Annotations[annotations.NodeLock])
	}
	if err := Bind(context.Background(), kube, me, "n1", devs, Options{NoBinding: true}); err != nil {
		t.Fatal(err)
	}
	p, _ := s.Pod("default", "me")
	for k, want := range map[string]string{
		annotations.DevicesToAllocate: devs.Encode(), annotations.DevicesAllocated: devs.Encode(),
		annotations.VGPUNode: "n1", annotations.BindPhase: "allocating",
	} {
		if p.Annotations[k] != want {
			t.Errorf("%s = %q, want %q", k, p.Annotations[k], want)
		}
	}
	if p.Annotations[annotations.VGPUTime] == "" || p.Annotations[annotations.BindTime] == "" {
		t.Errorf("times missing: %v", p.Annotations)
	}
	n, _ := s.Node("n1")
	if _, ns, name, err := ParseLock(n.Annotations[annotations.NodeLock]); err != nil || ns != "default" || name != "me" {
		t.Fatalf("lock %q: %s/%s %v", n.Annotations[annotations.NodeLock], ns, name, err)
	}
}
