package pods

import (
	"context"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/limitbed/limitbed/plugin/annotations"
)

func mkPod(name, node, phase, bindTime string) *corev1.Pod {
	ann := map[string]string{annotations.DevicesToAllocate: "GPU-a,NVIDIA,1000,10:;GPU-b,NVIDIA,2000,20:;"}
	if phase != "" {
		ann[annotations.BindPhase] = phase
	}
	if bindTime != "" {
		ann[annotations.BindTime] = bindTime
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), Annotations: ann},
		Spec: corev1.PodSpec{
			NodeName:       node,
			InitContainers: []corev1.Container{{Name: "init"}},
			Containers:     []corev1.Container{{Name: "a"}, {Name: "b"}},
		},
	}
}

func lockedNode(ns, name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1",
		Annotations: map[string]string{annotations.NodeLock: "2026-12-01T08:00:00Z," + ns + "," + name}}}
}

func TestPendingPods(t *testing.T) {
	cases := []struct {
		name string
		objs []runtime.Object
		want []string // nil = ErrNoPendingPod
	}{
		{"none", nil, nil},
		{"oldest bind-time first", []runtime.Object{
			mkPod("new", "n1", "allocating", "200"), mkPod("old", "n1", "allocating", "100"), mkPod("mid", "n1", "allocating", "150")},
			[]string{"old", "mid", "new"}},
		{"other node ignored", []runtime.Object{
			mkPod("other", "n2", "allocating", "1"), mkPod("mine", "n1", "allocating", "5")}, []string{"mine"}},
		{"only allocating", []runtime.Object{
			mkPod("done", "n1", "success", "1"), mkPod("failed", "n1", "failed", "1"), mkPod("unbound", "n1", "", "1")}, nil},
		{"missing bind-time ignored", []runtime.Object{mkPod("nobt", "n1", "allocating", "")}, nil},
		{"tie broken by name", []runtime.Object{
			mkPod("b", "n1", "allocating", "7"), mkPod("a", "n1", "allocating", "7")}, []string{"a", "b"}},
		{"the node lock's pod first", []runtime.Object{lockedNode("default", "new"),
			mkPod("new", "n1", "allocating", "200"), mkPod("old", "n1", "allocating", "100")}, []string{"new", "old"}},
		{"a lock naming no allocating pod changes nothing", []runtime.Object{lockedNode("default", "gone"),
			mkPod("new", "n1", "allocating", "200"), mkPod("old", "n1", "allocating", "100")}, []string{"old", "new"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &Client{Kube: fake.NewClientset(tc.objs...), NodeName: "n1"}
			ps, err := c.PendingPods(context.Background())
			if tc.want == nil {
				if !errors.Is(err, ErrNoPendingPod) {
					t.Fatalf("err = %v, want ErrNoPendingPod", err)
				}
				return
			}
			var got []string
			for _, p := range ps {
				got = append(got, p.Name)
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
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

func TestProtocolPatches(t *testing.T) {
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
	if err := c.SetDevicesToAllocate(ctx, p, devs); err != nil {
		t.Fatal(err)
	}
	if err := c.MarkSuccessIfDone(ctx, p); err != nil {
		t.Fatal(err)
	}
	if ph := get().Annotations[annotations.BindPhase]; ph != "allocating" {
		t.Fatalf("phase = %q after the first of two containers", ph)
	}
	idx, _, _ = devs.Next()
	devs = devs.Erase(idx)
	if err := c.SetDevicesToAllocate(ctx, p, devs); err != nil {
		t.Fatal(err)
	}
	if err := c.MarkSuccessIfDone(ctx, p); err != nil {
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

// The node lock is released once the pod it names is done, success or
// failed; a lock naming another pod stays.
func TestNodeLockRelease(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, lockedBy string
		fail           bool
		wantLock       bool
	}{
		{"success releases", "p", false, false},
		{"failed releases", "p", true, false},
		{"another pod's lock stays", "other", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mkPod("p", "n1", "allocating", "1")
			p.Annotations[annotations.DevicesToAllocate] = ";"
			kube := fake.NewClientset(p, lockedNode("default", tc.lockedBy))
			c := &Client{Kube: kube, NodeName: "n1"}
			var err error
			if tc.fail {
				err = c.MarkFailed(ctx, p)
			} else {
				err = c.MarkSuccessIfDone(ctx, p)
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
