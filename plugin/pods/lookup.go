// Package pods is the device plugin's side of HAMi's scheduler protocol on
// the API server: the scheduler takes the node's hami.io/mutex.lock for the
// pod it binds, records the placement in the pod's annotations and sets
// hami.io/bind-phase=allocating; the plugin hands the placement of the pod
// the lock names to the kubelet's Allocate (see Placement), entry by entry
// (Claim), and finally sets the phase to success or failed and releases the
// lock. Every call takes the caller's context: the caller bounds it.
package pods

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/limitbed/limitbed/plugin/annotations"
)

// Client reads and patches pods through the API server.
type Client struct {
	Kube     kubernetes.Interface
	NodeName string
}

// ContainerAt returns the container of entry idx of the device annotation:
// init containers first, then regular containers.
func ContainerAt(pod *corev1.Pod, idx int) (*corev1.Container, error) {
	if idx < 0 {
		return nil, fmt.Errorf("container index %d out of range", idx)
	}
	if idx < len(pod.Spec.InitContainers) {
		return &pod.Spec.InitContainers[idx], nil
	}
	idx -= len(pod.Spec.InitContainers)
	if idx < len(pod.Spec.Containers) {
		return &pod.Spec.Containers[idx], nil
	}
	return nil, fmt.Errorf("pod %s/%s: device entry %d has no container (%d init + %d containers)",
		pod.Namespace, pod.Name, idx+len(pod.Spec.InitContainers), len(pod.Spec.InitContainers), len(pod.Spec.Containers))
}

// MarkFailed sets bind-phase=failed so the scheduler can react (and so a
// refused pod is not taken for a waiting one again), and releases the node
// lock if it is held for the pod.
func (c *Client) MarkFailed(ctx context.Context, pod *corev1.Pod) error {
	if err := c.patchMeta(ctx, pod, map[string]any{"annotations": map[string]any{annotations.BindPhase: string(annotations.PhaseFailed)}}); err != nil {
		return err
	}
	return c.releaseNodeLock(ctx, pod)
}

// releaseNodeLock removes the node's hami.io/mutex.lock if it names pod, as
// HAMi's plugin does once the pod is done, so the scheduler can bind the next
// pod; it is written with the node's resourceVersion, so a lock the scheduler
// took for another pod meanwhile is never removed. A lock naming another pod,
// or none, is left alone.
func (c *Client) releaseNodeLock(ctx context.Context, pod *corev1.Pod) error {
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // no node object, no lock on it
	}
	if err != nil {
		return fmt.Errorf("release node lock on %s: %w", c.NodeName, err)
	}
	h, err := annotations.ParseNodeLock(n.Annotations[annotations.NodeLock])
	if err != nil || !h.Names(pod.Namespace, pod.Name) {
		return nil
	}
	meta := map[string]any{"annotations": map[string]any{annotations.NodeLock: nil}}
	if n.ResourceVersion != "" {
		meta["resourceVersion"] = n.ResourceVersion
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	if _, err := c.Kube.CoreV1().Nodes().Patch(ctx, c.NodeName, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("release node lock %s on %s: %w", annotations.NodeLock, c.NodeName, err)
	}
	return nil
}

func (c *Client) patchMeta(ctx context.Context, pod *corev1.Pod, meta map[string]any) error {
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	_, err = c.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patch pod %s/%s annotations: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}
