package pods

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/limitbed/limitbed/plugin/annotations"
)

// Placement is what the API server says about the pod an Allocate call is
// for. The kubelet's call does not name its pod; the scheduler's node lock
// does. Only the pod the lock names may be handed a placement, and only
// while no other pod on the node could be the one the kubelet is admitting.
type Placement struct {
	// Pod is the pod the node lock names, with an accepted placement; nil
	// when Refusal says why there is none.
	Pod     *corev1.Pod
	Refusal error
	// Contenders are the other pods on this node the kubelet may be
	// admitting now: they ask for the plugin's resource, the kubelet has not
	// started them, and they have no placement the plugin accepts (none at
	// all: they skipped the scheduler; or their own: not named by the lock).
	// While there is one, no call can be told apart from theirs.
	Contenders []Contender
	// Answered are this node's pods whose allocation has begun or is done
	// (bind-phase allocating or success), neither being deleted nor over:
	// the pods an earlier answer of the plugin may be for, which a kubelet
	// that restarted before it received that answer asks for again.
	Answered []*corev1.Pod
}

// Contender is a pod that may be behind an Allocate call without a
// placement the plugin accepts, and why.
type Contender struct {
	Pod *corev1.Pod
	Why string
}

// Placement reads the node lock and this node's pods. Its error is the API
// server's (transient: nothing is decided on it); a refusal is in the result.
func (c *Client) Placement(ctx context.Context, resource string) (Placement, error) {
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n, err = &corev1.Node{}, nil // no node object: no lock
	}
	if err != nil {
		return Placement{}, fmt.Errorf("get node %s: %w", c.NodeName, err)
	}
	list, err := c.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", c.NodeName).String(),
	})
	if err != nil {
		return Placement{}, fmt.Errorf("list pods on node %s: %w", c.NodeName, err)
	}
	var pl Placement
	lockValue, locked := n.Annotations[annotations.NodeLock]
	holder, lockErr := annotations.ParseNodeLock(lockValue)
	switch {
	case !locked:
		pl.Refusal = fmt.Errorf("no pod is being bound to node %s (no %s): nothing the scheduler placed is waiting for this call", c.NodeName, annotations.NodeLock)
	case lockErr != nil:
		pl.Refusal = fmt.Errorf("node %s: %w", c.NodeName, lockErr)
	case holder.Name == "":
		pl.Refusal = fmt.Errorf("node %s: %s %q names no pod (the legacy format); only a lock naming its pod is accepted", c.NodeName, annotations.NodeLock, lockValue)
	}
	for i := range list.Items {
		p := &list.Items[i]
		// The field selector is a server-side filter; check again so a fake
		// or a misbehaving server cannot hand us another node's pod.
		if p.Spec.NodeName != c.NodeName {
			continue
		}
		if answered(p) {
			pl.Answered = append(pl.Answered, p.DeepCopy())
		}
		if pl.Refusal == nil && holder.Names(p.Namespace, p.Name) {
			if why := c.placed(p); why != "" {
				pl.Refusal = fmt.Errorf("node lock names pod %s/%s, but %s", p.Namespace, p.Name, why)
			} else {
				pl.Pod = p.DeepCopy()
			}
			continue
		}
		if why := c.contender(p, resource, holder, locked && lockErr == nil); why != "" {
			pl.Contenders = append(pl.Contenders, Contender{Pod: p.DeepCopy(), Why: why})
		}
	}
	if pl.Pod == nil && pl.Refusal == nil {
		pl.Refusal = fmt.Errorf("node lock names pod %s/%s, which is not on node %s (not bound yet, or gone)", holder.Namespace, holder.Name, c.NodeName)
	}
	return pl, nil
}

// placed returns why the lock's pod p cannot be allocated, or "".
func (c *Client) placed(p *corev1.Pod) string {
	a := p.Annotations
	switch {
	case p.DeletionTimestamp != nil:
		return "it is being deleted"
	case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
		// The kubelet ended it (e.g. refused its admission): a later call is another pod's.
		return fmt.Sprintf("it is over (phase %s)", p.Status.Phase)
	case annotations.Phase(a[annotations.BindPhase]) != annotations.PhaseAllocating:
		return fmt.Sprintf("its %s is %q, not %q", annotations.BindPhase, a[annotations.BindPhase], annotations.PhaseAllocating)
	case a[annotations.VGPUNode] != c.NodeName:
		return fmt.Sprintf("its %s is %q, not this node", annotations.VGPUNode, a[annotations.VGPUNode])
	}
	if _, err := strconv.ParseInt(a[annotations.BindTime], 10, 64); err != nil {
		return fmt.Sprintf("it has no usable %s", annotations.BindTime)
	}
	return ""
}

// answered reports whether p's allocation has begun or is done, and p is
// neither being deleted nor over.
func answered(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return false
	}
	switch annotations.Phase(p.Annotations[annotations.BindPhase]) {
	case annotations.PhaseAllocating, annotations.PhaseSuccess:
		return true
	}
	return false
}

// contender returns why p could be behind this call without an accepted
// placement, or "" when it cannot be: it does not ask for resource, it is
// over, the kubelet already admitted it (started), or its allocation is
// done (success) or refused (failed).
func (c *Client) contender(p *corev1.Pod, resource string, holder annotations.LockHolder, lockValid bool) string {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.Status.StartTime != nil {
		return ""
	}
	if !requests(p, resource) {
		return ""
	}
	switch annotations.Phase(p.Annotations[annotations.BindPhase]) {
	case annotations.PhaseSuccess, annotations.PhaseFailed:
		return ""
	case annotations.PhaseAllocating:
		if lockValid && holder.Name != "" {
			return fmt.Sprintf("a placement not named by the node lock (%s names %s/%s)", annotations.NodeLock, holder.Namespace, holder.Name)
		}
		return "a placement not named by the node lock (the node has no lock naming a pod)"
	}
	return fmt.Sprintf("no placement by the scheduler (no %s=%s): it skipped the scheduler", annotations.BindPhase, annotations.PhaseAllocating)
}

// requests reports whether any container of p asks for resource.
func requests(p *corev1.Pod, resource string) bool {
	name := corev1.ResourceName(resource)
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, ct := range cs {
			for _, l := range []corev1.ResourceList{ct.Resources.Limits, ct.Resources.Requests} {
				if q, ok := l[name]; ok && !q.IsZero() {
					return true
				}
			}
		}
	}
	return false
}

// ErrConflict is returned by Claim when the pod changed since it was read.
var ErrConflict = errors.New("the pod changed since it was read")

// Claim hands out entries: it writes the remaining devices and, when none is
// left, bind-phase=success, in one patch that holds only if the pod is still
// the version read (optimistic concurrency), so two calls never take the same
// entry and a crash never leaves the entry taken without the phase.
func (c *Client) Claim(ctx context.Context, pod *corev1.Pod, left annotations.PodDevices) error {
	ann := map[string]any{annotations.DevicesToAllocate: left.Encode()}
	if !left.Pending() {
		ann[annotations.BindPhase] = string(annotations.PhaseSuccess)
	}
	meta := map[string]any{"annotations": ann}
	if pod.ResourceVersion != "" {
		meta["resourceVersion"] = pod.ResourceVersion
	}
	if err := c.patchMeta(ctx, pod, meta); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("claim %s of pod %s/%s: %w", annotations.DevicesToAllocate, pod.Namespace, pod.Name, ErrConflict)
		}
		return err
	}
	return nil
}

// ReleaseLockIfDone removes the node lock when the pod it names is done:
// success or failed, or gone. A plugin that stopped between the pod's last
// patch and the lock's release leaves such a lock; the next call clears it
// so the scheduler can bind the next pod.
func (c *Client) ReleaseLockIfDone(ctx context.Context) error {
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s: %w", c.NodeName, err)
	}
	h, err := annotations.ParseNodeLock(n.Annotations[annotations.NodeLock])
	if err != nil || h.Name == "" {
		return nil // no lock, or one this plugin does not own: the scheduler's to expire
	}
	p, err := c.Kube.CoreV1().Pods(h.Namespace).Get(ctx, h.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return c.releaseNodeLock(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.Namespace, Name: h.Name}})
	case err != nil:
		return fmt.Errorf("get pod %s/%s named by the node lock: %w", h.Namespace, h.Name, err)
	}
	switch annotations.Phase(p.Annotations[annotations.BindPhase]) {
	case annotations.PhaseSuccess, annotations.PhaseFailed:
		return c.releaseNodeLock(ctx, p)
	}
	return nil
}
