package identity

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/limitbed/limitbed/plugin/deviceplugin/fakekubelet"
)

// TestKubeletDevices reads the pod-resources API over real gRPC on a unix
// socket, as from the kubelet's.
func TestKubeletDevices(t *testing.T) {
	pr, err := fakekubelet.StartPodResources(filepath.Join(fakekubelet.ShortTempDir(t), "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Stop()
	pr.Assign("team", "p", "main", "nvidia.com/gpu", []string{DeviceID(gpuA, 1), DeviceID(gpuB, 0)})
	pr.Assign("team", "q", "main", "nvidia.com/gpu", []string{migC})
	pr.Forget("team", "q")
	got, err := (&Kubelet{Socket: pr.Socket}).ContainerDevices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []ContainerDevices{{Namespace: "team", Pod: "p", Container: "main", Resource: "nvidia.com/gpu", DeviceIDs: []string{DeviceID(gpuA, 1), DeviceID(gpuB, 0)}}}
	if !cmp.Equal(got, want) {
		t.Errorf("ContainerDevices = %+v, want %+v", got, want)
	}
	if _, err := (&Kubelet{Socket: filepath.Join(t.TempDir(), "none.sock")}).ContainerDevices(context.Background()); err == nil {
		t.Error("no error from a socket nobody serves")
	}
}
