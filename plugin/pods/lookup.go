// Package pods finds the pods an Allocate call may belong to and records the
// outcome on it, following HAMi's annotation protocol: the scheduler marks a
// bound pod hami.io/bind-phase=allocating (and names it in the node's
// hami.io/mutex.lock while it binds); the plugin picks, among those pods,
// the one whose next container entry of hami.io/vgpu-devices-to-allocate
// holds the devices kubelet asked for, hands out that entry, and finally
// sets the phase to success (every entry handed out) or failed.
package pods

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/limitbed/limitbed/plugin/annotations"
)

// ErrNoPendingPod is returned when no pod on the node is allocating.
var ErrNoPendingPod = errors.New("no pod with hami.io/bind-phase=allocating on this node")

// Client reads and patches pods through the API server.
type Client struct {
	Kube     kubernetes.Interface
	NodeName string
}

// PendingPods returns the pods on this node that are waiting for devices
// (phase allocating), in the order the plugin tries them: the pod the
// node's hami.io/mutex.lock names first (the scheduler holds that lock
// while it binds that pod), then oldest bind-time first, ties broken by
// namespace/name so the order is deterministic. The node lock is only a
// preference: the caller still checks each pod against kubelet's devices.
func (c *Client) PendingPods(ctx context.Context) ([]*corev1.Pod, error) {
	list, err := c.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", c.NodeName).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list pods on node %s: %w", c.NodeName, err)
	}
	locked := c.lockedPod(ctx)
	type candidate struct {
		pod      *corev1.Pod
		locked   bool
		bindTime int64
	}
	var cands []candidate
	for i := range list.Items {
		p := &list.Items[i]
		// The field selector is a server-side filter; check again so a fake
		// or a misbehaving server cannot hand us another node's pod.
		if p.Spec.NodeName != c.NodeName || p.DeletionTimestamp != nil {
			continue
		}
		if annotations.Phase(p.Annotations[annotations.BindPhase]) != annotations.PhaseAllocating {
			continue
		}
		if n, ok := p.Annotations[annotations.VGPUNode]; ok && n != c.NodeName {
			continue
		}
		bt, err := strconv.ParseInt(p.Annotations[annotations.BindTime], 10, 64)
		if err != nil {
			continue // no usable bind-time: not bound by the scheduler
		}
		cands = append(cands, candidate{p, locked != "" && locked == p.Namespace+"/"+p.Name, bt})
	}
	if len(cands) == 0 {
		return nil, ErrNoPendingPod
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.locked != b.locked {
			return a.locked
		}
		if a.bindTime != b.bindTime {
			return a.bindTime < b.bindTime
		}
		return a.pod.Namespace+"/"+a.pod.Name < b.pod.Namespace+"/"+b.pod.Name
	})
	out := make([]*corev1.Pod, len(cands))
	for i, cd := range cands {
		out[i] = cd.pod.DeepCopy()
	}
	return out, nil
}

// lockedPod returns "namespace/name" from the node's hami.io/mutex.lock
// ("<RFC3339>,<namespace>,<podName>"), or "" when there is none or it cannot
// be read: the lock only orders the candidates.
func (c *Client) lockedPod(ctx context.Context) string {
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	parts := strings.Split(n.Annotations[annotations.NodeLock], ",")
	if len(parts) != 3 || parts[1] == "" || parts[2] == "" {
		return ""
	}
	return parts[1] + "/" + parts[2]
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

// SetDevicesToAllocate stores the remaining devices.
func (c *Client) SetDevicesToAllocate(ctx context.Context, pod *corev1.Pod, devs annotations.PodDevices) error {
	return c.patch(ctx, pod, map[string]any{annotations.DevicesToAllocate: devs.Encode()})
}

// MarkSuccessIfDone re-reads the pod and sets bind-phase=success once no
// container entry is left; other containers may still be waiting.
func (c *Client) MarkSuccessIfDone(ctx context.Context, pod *corev1.Pod) error {
	cur, err := c.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	left, err := annotations.DecodePodDevices(cur.Annotations[annotations.DevicesToAllocate])
	if err != nil {
		return err
	}
	if left.Pending() {
		return nil
	}
	if err := c.patch(ctx, cur, map[string]any{annotations.BindPhase: string(annotations.PhaseSuccess)}); err != nil {
		return err
	}
	return c.releaseNodeLock(ctx, cur)
}

// MarkFailed sets bind-phase=failed so the scheduler can react, and
// releases the node lock held for the pod.
func (c *Client) MarkFailed(ctx context.Context, pod *corev1.Pod) error {
	if err := c.patch(ctx, pod, map[string]any{annotations.BindPhase: string(annotations.PhaseFailed)}); err != nil {
		return err
	}
	return c.releaseNodeLock(ctx, pod)
}

// releaseNodeLock removes the node's hami.io/mutex.lock once the pod it
// names is done (success or failed), as HAMi's plugin does, so the
// scheduler can bind the next pod. A lock naming another pod, or none, is
// left alone; a node that cannot be read (no permission) is not an error.
func (c *Client) releaseNodeLock(ctx context.Context, pod *corev1.Pod) error {
	if c.lockedPod(ctx) != pod.Namespace+"/"+pod.Name {
		return nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{annotations.NodeLock: nil}}})
	if err != nil {
		return err
	}
	if _, err := c.Kube.CoreV1().Nodes().Patch(ctx, c.NodeName, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("release node lock %s on %s: %w", annotations.NodeLock, c.NodeName, err)
	}
	return nil
}

func (c *Client) patch(ctx context.Context, pod *corev1.Pod, ann map[string]any) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	_, err = c.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patch pod %s/%s annotations: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}
