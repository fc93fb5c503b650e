package kubesource

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/limitbed/limitbed/plugin/deviceplugin/fakekubelet"
	"github.com/limitbed/limitbed/plugin/identity"
)

const (
	gpuA = "GPU-aaaaaaaa-0000-4000-8000-000000000001"
	gpuB = "GPU-bbbbbbbb-0000-4000-8000-000000000002"
	migC = "MIG-cccccccc-0000-4000-8000-000000000003"
)

// TestKubeletDevices reads the pod-resources API over real gRPC on a unix
// socket, as from the kubelet's.
func TestKubeletDevices(t *testing.T) {
	pr, err := fakekubelet.StartPodResources(filepath.Join(fakekubelet.ShortTempDir(t), "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Stop()
	pr.Assign("team", "p", "main", "nvidia.com/gpu", []string{identity.DeviceID(gpuA, 1), identity.DeviceID(gpuB, 0)})
	pr.Assign("team", "q", "main", "nvidia.com/gpu", []string{migC})
	pr.Forget("team", "q")
	got, err := (&Kubelet{Socket: pr.Socket}).ContainerDevices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []identity.ContainerDevices{{Namespace: "team", Pod: "p", Container: "main", Resource: "nvidia.com/gpu", DeviceIDs: []string{identity.DeviceID(gpuA, 1), identity.DeviceID(gpuB, 0)}}}
	if !cmp.Equal(got, want) {
		t.Errorf("ContainerDevices = %+v, want %+v", got, want)
	}
	if _, err := (&Kubelet{Socket: filepath.Join(t.TempDir(), "none.sock")}).ContainerDevices(context.Background()); err == nil {
		t.Error("no error from a socket nobody serves")
	}
}

// TestAPIServerDropsOtherNodes: a pod of another node, returned by a server that ignores the
// field selector (the fake clientset does), is not this node's.
func TestAPIServerDropsOtherNodes(t *testing.T) {
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	}
	kube := fake.NewClientset(pod("mine", "n1"), pod("other", "n2"))
	pods, err := (&APIServer{Kube: kube, NodeName: "n1"}).NodePods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].Name != "mine" {
		t.Errorf("NodePods = %v, want only n1's pod", pods)
	}
}
