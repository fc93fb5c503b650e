// Package kubesource is where the node's identity comes from in Kubernetes: the API server's pods
// of this node and the kubelet's pod-resources API (which devices it handed to each container).
// They are the clients behind plugin/identity's PodSource and DeviceSource, apart from its types
// so that a reader of identities links no gRPC or API client (NVIDIA's device plugin keeps its
// types apart from any client in the same way).
package kubesource

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/limitbed/limitbed/plugin/identity"
)

// APIServer lists this node's pods.
type APIServer struct {
	Kube     kubernetes.Interface
	NodeName string
}

var _ identity.PodSource = (*APIServer)(nil)

// NodePods implements identity.PodSource. The field selector is the server's filter;
// the node is checked again here, so a misbehaving server cannot hand over
// another node's pod.
func (a *APIServer) NodePods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := a.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", a.NodeName).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list the pods of node %s: %w", a.NodeName, err)
	}
	out := list.Items[:0]
	for _, p := range list.Items {
		if p.Spec.NodeName == a.NodeName {
			out = append(out, p)
		}
	}
	return out, nil
}

// DefaultKubeletTimeout bounds one pod-resources call.
const DefaultKubeletTimeout = 10 * time.Second

// Kubelet is the kubelet's pod-resources API on its unix socket
// (/var/lib/kubelet/pod-resources/kubelet.sock).
type Kubelet struct {
	Socket  string
	Timeout time.Duration // 0: DefaultKubeletTimeout
}

var _ identity.DeviceSource = (*Kubelet)(nil)

// List returns the pod-resources answer as it is.
func (k *Kubelet) List(ctx context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
	conn, err := grpc.NewClient("unix://"+k.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", k.Socket, err)
	}
	defer conn.Close()
	timeout := k.Timeout
	if timeout <= 0 {
		timeout = DefaultKubeletTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod-resources List on %s: %w", k.Socket, err)
	}
	return resp, nil
}

// ContainerDevices implements identity.DeviceSource.
func (k *Kubelet) ContainerDevices(ctx context.Context) ([]identity.ContainerDevices, error) {
	resp, err := k.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []identity.ContainerDevices
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				out = append(out, identity.ContainerDevices{Namespace: p.GetNamespace(), Pod: p.GetName(), Container: c.GetName(),
					Resource: d.GetResourceName(), DeviceIDs: d.GetDeviceIds()})
			}
		}
	}
	return out, nil
}
