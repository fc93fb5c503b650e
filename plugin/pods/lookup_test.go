package pods

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/limitbed/limitbed/plugin/annotations"
)

func mkPod(name, node, phase, bindTime string) *corev1.Pod {
	ann := map[string]string{annotations.DevicesToAllocate: "GPU-a,NVIDIA,1000,10:;GPU-b,NVIDIA,2000,20:;", annotations.VGPUNode: node}
	if phase != "" {
		ann[annotations.BindPhase] = phase
	}
	if bindTime != "" {
		ann[annotations.BindTime] = bindTime
	}
	gpu := corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), Annotations: ann},
		Spec: corev1.PodSpec{
			NodeName:       node,
			InitContainers: []corev1.Container{{Name: "init"}},
			Containers:     []corev1.Container{{Name: "a", Resources: gpu}, {Name: "b", Resources: gpu}},
		},
	}
}

func lockedNode(ns, name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1",
		Annotations: map[string]string{annotations.NodeLock: "2026-12-01T08:00:00Z," + ns + "," + name}}}
}

func plainNode() *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}} }

// withoutPlacement is a GPU pod on n1 that skipped the scheduler.
func withoutPlacement(name string) *corev1.Pod {
	p := mkPod(name, "n1", "", "")
	p.Annotations = nil
	return p
}

// Only the pod the node lock names is accepted, and only with the
// scheduler's placement; every other pod on the node the kubelet may be
// admitting (it wants the resource, was not started, and its allocation is
// neither done nor refused) is a contender, with the reason.
func TestPlacement(t *testing.T) {
	started := mkPod("started", "n1", "", "")
	started.Annotations = nil
	started.Status.StartTime = &metav1.Time{}
	noGPU := withoutPlacement("nogpu")
	noGPU.Spec.Containers = []corev1.Container{{Name: "a"}}
	over := withoutPlacement("over")
	over.Status.Phase = corev1.PodFailed
	cases := []struct {
		name        string
		objs        []runtime.Object
		pod         string // "" = refused
		refusal     string
		contenders  []string
		contendWhys []string
	}{
		{name: "no lock", objs: []runtime.Object{plainNode(), mkPod("p", "n1", "allocating", "1")},
			refusal: "no hami.io/mutex.lock", contenders: []string{"p"}, contendWhys: []string{"the node has no lock naming a pod"}},
		{name: "the lock's pod", objs: []runtime.Object{lockedNode("default", "p"), mkPod("p", "n1", "allocating", "1")}, pod: "p"},
		{name: "legacy lock without owner", objs: []runtime.Object{
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{annotations.NodeLock: "2026-12-01T08:00:00Z"}}},
			mkPod("p", "n1", "allocating", "1")}, refusal: "names no pod", contenders: []string{"p"}},
		{name: "lock names a pod on another node", objs: []runtime.Object{lockedNode("default", "p"), mkPod("p", "n2", "allocating", "1")},
			refusal: "not on node n1"},
		{name: "lock's pod not allocating", objs: []runtime.Object{lockedNode("default", "p"), mkPod("p", "n1", "success", "1")},
			refusal: `bind-phase is "success"`},
		{name: "lock's pod placed for another node", objs: []runtime.Object{lockedNode("default", "p"), func() *corev1.Pod {
			p := mkPod("p", "n1", "allocating", "1")
			p.Annotations[annotations.VGPUNode] = "n2"
			return p
		}()}, refusal: `vgpu-node is "n2"`},
		{name: "lock's pod already failed by the kubelet", objs: []runtime.Object{lockedNode("default", "p"), func() *corev1.Pod {
			p := mkPod("p", "n1", "allocating", "1")
			p.Status.Phase = corev1.PodFailed
			return p
		}()}, refusal: "it is over (phase Failed)"},
		{name: "lock's pod without bind time", objs: []runtime.Object{lockedNode("default", "p"), mkPod("p", "n1", "allocating", "")},
			refusal: "no usable hami.io/bind-time"},
		{name: "unparsable lock", objs: []runtime.Object{lockedNode("default", "p/../x"), mkPod("p", "n1", "allocating", "1")},
			refusal: "pod name", contenders: []string{"p"}},
		{name: "a pod that skipped the scheduler contends", objs: []runtime.Object{lockedNode("default", "p"), mkPod("p", "n1", "allocating", "1"), withoutPlacement("rogue")},
			pod: "p", contenders: []string{"rogue"}, contendWhys: []string{"it skipped the scheduler"}},
		{name: "a placement of its own contends", objs: []runtime.Object{lockedNode("default", "p"), mkPod("p", "n1", "allocating", "1"), mkPod("trap", "n1", "allocating", "0")},
			pod: "p", contenders: []string{"trap"}, contendWhys: []string{"not named by the node lock (hami.io/mutex.lock names default/p)"}},
		{name: "done, refused, started, over, GPU-less and other-node pods do not", objs: []runtime.Object{lockedNode("default", "p"), mkPod("p", "n1", "allocating", "1"),
			mkPod("done", "n1", "success", "1"), mkPod("refused", "n1", "failed", "1"), started, noGPU, over, mkPod("elsewhere", "n2", "", "")},
			pod: "p"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &Client{Kube: fake.NewClientset(tc.objs...), NodeName: "n1"}
			pl, err := c.Placement(context.Background(), "nvidia.com/gpu")
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.pod != "" && (pl.Pod == nil || pl.Pod.Name != tc.pod):
				t.Fatalf("pod = %v (refusal %v), want %s", pl.Pod, pl.Refusal, tc.pod)
			case tc.pod == "" && (pl.Pod != nil || pl.Refusal == nil || !strings.Contains(pl.Refusal.Error(), tc.refusal)):
				t.Fatalf("pod = %v, refusal = %v, want a refusal containing %q", pl.Pod, pl.Refusal, tc.refusal)
			}
			var got []string
			for i, ct := range pl.Contenders {
				got = append(got, ct.Pod.Name)
				if i < len(tc.contendWhys) && !strings.Contains(ct.Why, tc.contendWhys[i]) {
					t.Errorf("contender %s: why = %q, want %q", ct.Pod.Name, ct.Why, tc.contendWhys[i])
				}
			}
			if !slices.Equal(got, tc.contenders) {
				t.Fatalf("contenders = %v, want %v", got, tc.contenders)
			}
		})
	}
}

func TestPlacementAPIErrorIsNotARefusal(t *testing.T) {
	kube := fake.NewClientset(lockedNode("default", "p"), mkPod("p", "n1", "allocating", "1"))
	boom := errors.New("apiserver down")
	kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, boom })
	c := &Client{Kube: kube, NodeName: "n1"}
	if _, err := c.Placement(context.Background(), "nvidia.com/gpu"); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the API error", err)
	}
}

func TestContainerAt(t *testing.T) {
	p := mkPod("p", "n1", "allocating", "1")
	for idx, want := range []string{"init", "a", "b"} {
		c, err := ContainerAt(p, idx)
		if err != nil || c.Name != want {
			t.Fatalf("ContainerAt(%d) = %v, %v", idx, c, err)
		}
	}
	if _, err := ContainerAt(p, 3); err == nil {
		t.Fatal("index past the last container accepted")
	}
}

// Claim hands out entries; the last one sets bind-phase=success in the same
// patch.
func TestClaim(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(mkPod("p", "n1", "allocating", "1"))
	c := &Client{Kube: kube, NodeName: "n1"}
	get := func() *corev1.Pod {
		p, err := kube.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := get()
	devs, _ := annotations.DecodePodDevices(p.Annotations[annotations.DevicesToAllocate])
	idx, _, _ := devs.Next()
	devs = devs.Erase(idx)
	if err := c.Claim(ctx, p, devs); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.Annotations[annotations.BindPhase] != "allocating" || got.Annotations[annotations.DevicesToAllocate] != ";GPU-b,NVIDIA,2000,20:;" {
		t.Fatalf("after the first of two containers: %v", got.Annotations)
	}
	idx, _, _ = devs.Next()
	devs = devs.Erase(idx)
	if err := c.Claim(ctx, get(), devs); err != nil {
		t.Fatal(err)
	}
	got := get()
	if got.Annotations[annotations.BindPhase] != "success" || got.Annotations[annotations.DevicesToAllocate] != ";;" {
		t.Fatalf("annotations = %v", got.Annotations)
	}
	if err := c.MarkFailed(ctx, got); err != nil {
		t.Fatal(err)
	}
	if ph := get().Annotations[annotations.BindPhase]; ph != "failed" {
		t.Fatalf("phase = %q, want failed", ph)
	}
}

// A claim on a pod that changed since it was read is ErrConflict, so the
// caller reads again instead of handing out an entry twice.
func TestClaimConflict(t *testing.T) {
	kube := fake.NewClientset(mkPod("p", "n1", "allocating", "1"))
	kube.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), `"resourceVersion":"7"`) {
			return true, nil, apierrors.NewConflict(corev1.Resource("pods"), "p", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	c := &Client{Kube: kube, NodeName: "n1"}
	p := mkPod("p", "n1", "allocating", "1")
	p.ResourceVersion = "7"
	if err := c.Claim(context.Background(), p, annotations.PodDevices{nil}); !errors.Is(err, ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
}

func TestPatchErrorIsWrapped(t *testing.T) {
	kube := fake.NewClientset(mkPod("p", "n1", "allocating", "1"))
	boom := errors.New("apiserver down")
	kube.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, boom })
	c := &Client{Kube: kube, NodeName: "n1"}
	err := c.MarkFailed(context.Background(), mkPod("p", "n1", "", ""))
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want wrapped %v", err, boom)
	}
}

// The node lock is released once the pod it names is done (MarkFailed for
// the pod, or ReleaseLockIfDone finding it success, failed or gone); a lock
// naming another pod, or a pod still allocating, stays.
func TestNodeLockRelease(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, lockedBy, phase string
		markFailed            bool
		wantLock              bool
	}{
		{"failed releases", "p", "allocating", true, false},
		{"another pod's lock stays", "other", "allocating", true, true},
		{"a done pod's lock is released", "p", "success", false, false},
		{"a failed pod's lock is released", "p", "failed", false, false},
		{"a gone pod's lock is released", "gone", "allocating", false, false},
		{"an allocating pod's lock stays", "p", "allocating", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mkPod("p", "n1", tc.phase, "1")
			kube := fake.NewClientset(p, lockedNode("default", tc.lockedBy))
			c := &Client{Kube: kube, NodeName: "n1"}
			var err error
			if tc.markFailed {
				err = c.MarkFailed(ctx, p)
			} else {
				err = c.ReleaseLockIfDone(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			n, err := kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := n.Annotations[annotations.NodeLock]; ok != tc.wantLock {
				t.Fatalf("lock present = %v, want %v (%v)", ok, tc.wantLock, n.Annotations)
			}
		})
	}
}
