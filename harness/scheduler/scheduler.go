// Package scheduler plays HAMi's scheduler for the harness, by its protocol on the API server: take
// the node's hami.io/mutex.lock (optimistic concurrency: the lock is written with the
// resourceVersion read), record the placement in the pod's annotations (hami.io/vgpu-node,
// hami.io/vgpu-time, hami.io/vgpu-devices-to-allocate, hami.io/vgpu-devices-allocated), set
// hami.io/bind-phase=allocating and hami.io/bind-time, and bind the pod. The device plugin then
// finds the pod by the lock in Allocate and, HAMi's plugin at least, releases the lock when the pod's
// bind-phase is success or failed. The matrix's nodes (harness/matrix/node) and the kind tier
// (harness/kindcluster) share it.
package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/limitbed/limitbed/plugin/annotations"
)

// LockExpiry is how long a lock holds before any scheduler may break it (HAMi's default).
const LockExpiry = 5 * time.Minute

// Options tunes Bind.
type Options struct {
	// LockWait is how long Bind waits for another pod's live lock (default 30 s).
	LockWait time.Duration
	// NoBinding leaves out the pods/binding call: the pod already names its node (an API server
	// without the binding subresource, as harness/fakeapi).
	NoBinding bool
	// BeforeBinding, when set, runs after the placement and the bind phase are written, with the
	// node lock held, and before the binding: what may happen between a scheduler's decision and
	// the kubelet's admission (a test of the plugin's trust model). Its error fails the Bind.
	BeforeBinding func(ctx context.Context) error
}

// Bind places pod on node with devs (one entry per container, init containers first): it takes the
// node lock, writes the placement and bind-phase annotations, and binds the pod. If anything after
// the lock fails, the lock is released and the pod's bind-phase set to failed.
func Bind(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, node string, devs annotations.PodDevices, opts Options) error {
	want := len(pod.Spec.InitContainers) + len(pod.Spec.Containers)
	if len(devs) != want {
		return fmt.Errorf("bind %s/%s: %d device entries for %d containers", pod.Namespace, pod.Name, len(devs), want)
	}
	if err := Lock(ctx, kube, node, pod, opts.LockWait); err != nil {
		return fmt.Errorf("bind %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	err := annotate(ctx, kube, pod, node, devs, opts)
	if err != nil {
		_ = patchPod(ctx, kube, pod, map[string]any{annotations.BindPhase: string(annotations.PhaseFailed)})
		if rerr := Release(ctx, kube, node, pod); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("bind %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

func annotate(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, node string, devs annotations.PodDevices, opts Options) error {
	now := strconv.FormatInt(time.Now().Unix(), 10)
	enc := devs.Encode()
	filter := map[string]any{
		annotations.VGPUNode:          node,
		annotations.VGPUTime:          now,
		annotations.DevicesToAllocate: enc,
		annotations.DevicesAllocated:  enc,
	}
	if err := patchPod(ctx, kube, pod, filter); err != nil {
		return fmt.Errorf("filter annotations: %w", err)
	}
	bind := map[string]any{annotations.BindPhase: string(annotations.PhaseAllocating), annotations.BindTime: now}
	if err := patchPod(ctx, kube, pod, bind); err != nil {
		return fmt.Errorf("bind phase: %w", err)
	}
	if opts.BeforeBinding != nil {
		if err := opts.BeforeBinding(ctx); err != nil {
			return fmt.Errorf("before binding: %w", err)
		}
	}
	if opts.NoBinding {
		return nil
	}
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	if err := kube.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("bind to %s: %w", node, err)
	}
	return nil
}

// LockValue is the lock annotation's value for pod at t (the format's owner is plugin/annotations).
func LockValue(t time.Time, pod *corev1.Pod) string {
	return annotations.FormatNodeLock(t, pod.Namespace, pod.Name)
}

// ParseLock splits a lock value into its time and owner; a value without an owner (the legacy
// timestamp-only format) has empty namespace and name.
func ParseLock(v string) (t time.Time, namespace, name string, err error) {
	h, err := annotations.ParseNodeLock(v)
	return h.Time, h.Namespace, h.Name, err
}

// Lock takes node's lock for pod. A lock held by another pod is waited for (up to wait, default
// 30 s) unless it is stale: expired (LockExpiry), its pod gone, or its pod's allocation over
// (bind-phase success or failed; a plugin release that does not release the lock would otherwise
// hold the node until expiry). Every write carries the resourceVersion read, so of
// two schedulers racing for the lock one gets 409 Conflict and tries again.
func Lock(ctx context.Context, kube kubernetes.Interface, node string, pod *corev1.Pod, wait time.Duration) error {
	if wait <= 0 {
		wait = 30 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("lock node %s: %w", node, err)
		}
		held, ok := n.Annotations[annotations.NodeLock]
		var value any = LockValue(time.Now(), pod)
		if ok {
			stale, why, err := staleLock(ctx, kube, held, pod)
			if err != nil {
				return fmt.Errorf("lock node %s: %w", node, err)
			}
			if !stale {
				if time.Now().After(deadline) {
					return fmt.Errorf("lock node %s: held (%s) for more than %s: %s", node, held, wait, why)
				}
				if err := sleep(ctx, 50*time.Millisecond); err != nil {
					return fmt.Errorf("lock node %s: %w", node, err)
				}
				continue
			}
		}
		err = patchNode(ctx, kube, node, n.ResourceVersion, value)
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err):
			continue
		default:
			return fmt.Errorf("lock node %s: %w", node, err)
		}
	}
}

// staleLock reports whether a held lock may be taken over by pod, or why not.
func staleLock(ctx context.Context, kube kubernetes.Interface, held string, pod *corev1.Pod) (bool, string, error) {
	t, ns, name, err := ParseLock(held)
	if err != nil {
		return true, "", nil // unreadable: HAMi's scheduler overwrites it too
	}
	if time.Since(t) > LockExpiry || (ns == pod.Namespace && name == pod.Name) {
		return true, "", nil
	}
	if name == "" {
		return false, "a lock without an owner holds until it expires", nil
	}
	owner, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("owner %s/%s of the lock: %w", ns, name, err)
	}
	phase := owner.Annotations[annotations.BindPhase]
	if phase == string(annotations.PhaseSuccess) || phase == string(annotations.PhaseFailed) {
		return true, "", nil
	}
	return false, fmt.Sprintf("pod %s/%s is still allocating (bind-phase %q)", ns, name, phase), nil
}

// Release removes node's lock if pod holds it (a no-op otherwise), with the resourceVersion read.
func Release(ctx context.Context, kube kubernetes.Interface, node string, pod *corev1.Pod) error {
	for {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("release lock of node %s: %w", node, err)
		}
		held, ok := n.Annotations[annotations.NodeLock]
		if !ok {
			return nil
		}
		if _, ns, name, err := ParseLock(held); err == nil && name != "" && (ns != pod.Namespace || name != pod.Name) {
			return nil
		}
		err = patchNode(ctx, kube, node, n.ResourceVersion, nil)
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("release lock of node %s: %w", node, err)
		}
	}
}

// patchNode sets (value a string) or removes (nil) the lock, expecting resourceVersion rv.
func patchNode(ctx context.Context, kube kubernetes.Interface, node, rv string, value any) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]any{annotations.NodeLock: value}, "resourceVersion": rv}})
	if err != nil {
		return err
	}
	_, err = kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}

func patchPod(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, ann map[string]any) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	_, err = kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
