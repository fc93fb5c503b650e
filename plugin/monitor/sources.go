package monitor

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// APIPods lists this node's pods from the API server.
type APIPods struct {
	Kube     kubernetes.Interface
	NodeName string
}

var _ PodLister = (*APIPods)(nil)

// ListPods implements PodLister.
func (a *APIPods) ListPods(ctx context.Context) ([]PodRef, error) {
	list, err := a.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", a.NodeName).String(),
	})
	if err != nil {
		return nil, err
	}
	out := make([]PodRef, 0, len(list.Items))
	for _, p := range list.Items {
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
	conn, err := grpc.NewClient("unix://"+k.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", k.Socket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod-resources List on %s: %w", k.Socket, err)
	}
	out := make([]PodRef, 0, len(resp.PodResources))
	for _, p := range resp.PodResources {
		out = append(out, PodRef{Namespace: p.Namespace, Name: p.Name})
	}
	return out, nil
}
