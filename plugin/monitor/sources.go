package monitor

import (
	"context"

	"k8s.io/client-go/kubernetes"

	"github.com/limitbed/limitbed/plugin/identity/kubesource"
)

// APIPods lists this node's pods from the API server.
type APIPods struct {
	Kube     kubernetes.Interface
	NodeName string
}

var _ PodLister = (*APIPods)(nil)

// ListPods implements PodLister.
func (a *APIPods) ListPods(ctx context.Context) ([]PodRef, error) {
	pods, err := (&kubesource.APIServer{Kube: a.Kube, NodeName: a.NodeName}).NodePods(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]PodRef, 0, len(pods))
	for _, p := range pods {
		out = append(out, PodRef{UID: p.UID, Namespace: p.Namespace, Name: p.Name})
	}
	return out, nil
}

// KubeletPods lists pods from kubelet's pod-resources API
// (/var/lib/kubelet/pod-resources/kubelet.sock).
type KubeletPods struct {
	Socket string
}

var _ PodResourcesLister = (*KubeletPods)(nil)

// ListPods implements PodResourcesLister.
func (k *KubeletPods) ListPods(ctx context.Context) ([]PodRef, error) {
	resp, err := (&kubesource.Kubelet{Socket: k.Socket}).List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]PodRef, 0, len(resp.PodResources))
	for _, p := range resp.PodResources {
		out = append(out, PodRef{Namespace: p.Namespace, Name: p.Name})
	}
	return out, nil
}
