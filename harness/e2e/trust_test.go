//go:build kind

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/limitbed/limitbed/harness/kindcluster"
	"github.com/limitbed/limitbed/harness/scheduler"
	"github.com/limitbed/limitbed/plugin/annotations"
)

// The trust model (docs/trust-model.md) on a real kubelet: a pod that writes its own placement, a
// pod that skips the scheduler and a trap pod are each refused with an Event saying why, and the
// victim beside them is allocated normally; the chart's admission policy keeps a pod's owner from
// writing placement annotations at all, while the scheduler (the harness, acting as the scheduler's
// service account) places pods as usual.
//
// The node's own checks are shown in a namespace outside the admission policy
// (placementPolicyLabel=off, chartValues), i.e. a cluster without it.

// placementPolicyLabel=off takes a namespace out of the chart's admission policy (chartValues).
const placementPolicyLabel = "limitbed.io/placement-policy"

// unguarded creates a namespace outside the admission policy, deleted when the test ends.
func unguarded(t *testing.T, e *testEnv) string {
	t.Helper()
	name := strings.TrimPrefix(podName(t), "gpu-")
	if len(name) > 40 {
		name = name[:40]
	}
	name = "unguarded-" + strings.Trim(name, "-")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{placementPolicyLabel: "off"}}}
	if _, err := e.c.Kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = e.c.Kube.CoreV1().Namespaces().Delete(context.WithoutCancel(t.Context()), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	return name
}

// trustPod is a workload pod asking for one vGPU with memMiB; with node set it names its node
// itself (skipping any scheduler), else it waits for the harness's scheduler.
func trustPod(ns, name, node string, memMiB int64, ann map[string]string) *corev1.Pod {
	grace := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann},
		Spec: corev1.PodSpec{
			SchedulerName: kindcluster.SchedulerName, NodeName: node, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "main", Image: "limitbed/workload:dev", ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "infinity"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					"nvidia.com/gpu":    resource.MustParse("1"),
					"nvidia.com/gpumem": *resource.NewQuantity(memMiB, resource.DecimalSI),
				}},
			}},
		},
	}
	return p
}

func createPod(t *testing.T, e *testEnv, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := e.c.Kube.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	t.Cleanup(func() {
		if err := e.c.DeletePod(context.WithoutCancel(t.Context()), p.Namespace, p.Name); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("cleanup: %v", err)
		}
	})
	return got
}

// waitRefused waits until the device plugin recorded a PlacementRefused event on the pod saying
// want, and the kubelet failed the pod's admission.
func waitRefused(ctx context.Context, t *testing.T, e *testEnv, ns, name, want string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := e.c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		found := false
		for _, ev := range evs.Items {
			seen = append(seen, ev.Reason+": "+ev.Message)
			found = found || (ev.Reason == "PlacementRefused" && ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, want))
		}
		p, err := e.c.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return found && err == nil && p.Status.Phase == corev1.PodFailed, nil
	})
	if err != nil {
		p, _ := e.c.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		var status any
		if p != nil {
			status = p.Status
		}
		t.Fatalf("pod %s/%s: no PlacementRefused event saying %q and a failed admission (events %q, status %+v): %v", ns, name, want, seen, status, err)
	}
}

func gpuDevs(uuid string, mem int32) annotations.PodDevices {
	return annotations.PodDevices{{{UUID: uuid, Type: "NVIDIA", UsedMem: mem}}}
}

// A pod's owner rewrites the scheduler's placement (0 MiB: no limit) between the scheduler's decision
// and the kubelet's admission. The plugin holds the placement to the pod's own request and refuses;
// the victim running beside it keeps its limit, and the next pod is allocated normally.
func TestKindPodWritesItsOwnPlacement(t *testing.T) {
	e := need(t)
	ctx := t.Context()
	node := e.c.Worker(fileWorker)
	victim := gpuPodNamed(t, e, fileWorker, e.gpuUUID, podName(t)+"-victim", 2000, nil)
	ns := unguarded(t, e)
	attacker := createPod(t, e, trustPod(ns, "attacker", "", 1000, nil))
	own, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		annotations.DevicesToAllocate: gpuDevs(e.gpuUUID, 0).Encode()}}})
	err := scheduler.Bind(ctx, e.c.Scheduler, attacker, node, gpuDevs(e.gpuUUID, 1000), scheduler.Options{
		LockWait: 2 * time.Minute,
		BeforeBinding: func(ctx context.Context) error { // the owner's write (no admission policy here)
			_, err := e.c.Kube.CoreV1().Pods(ns).Patch(ctx, "attacker", types.MergePatchType, own, metav1.PatchOptions{})
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitRefused(ctx, t, e, ns, "attacker", "the placement gives 0 MiB (no limit at all), but the container requests nvidia.com/gpumem: 1000")
	wantRefused(t, "exec", probe(t, victim, "exec", 4096), 2000)
	next := gpuPodNamed(t, e, fileWorker, e.gpuUUID, podName(t)+"-next", 1500, nil)
	wantRefused(t, "exec", probe(t, next, "exec", 4096), 1500)
}

// A pod that names its node itself, admitted while the scheduler holds the node lock for the
// victim: its call is refused (it gets nothing of the victim's) with an event on it, and the
// victim, bound next, is allocated normally.
func TestKindPodSkipsTheScheduler(t *testing.T) {
	e := need(t)
	ctx := t.Context()
	node := e.c.Worker(fileWorker)
	victim := createPod(t, e, trustPod(testNamespace, podName(t)+"-victim", "", 1200, nil))
	err := scheduler.Bind(ctx, e.c.Scheduler, victim, node, gpuDevs(e.gpuUUID, 1200), scheduler.Options{
		LockWait: 2 * time.Minute,
		BeforeBinding: func(ctx context.Context) error { // the lock names the victim now
			createPod(t, e, trustPod(testNamespace, podName(t)+"-rogue", node, 8000, nil))
			waitRefused(ctx, t, e, testNamespace, podName(t)+"-rogue", "no placement by the scheduler")
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.WaitPodRunning(ctx, testNamespace, victim.Name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	pc, err := e.c.PodContainer(ctx, testNamespace, victim.Name, "main")
	if err != nil {
		t.Fatal(err)
	}
	if limits := nodeLimitsFile(t, e, node, pc); !strings.Contains(limits, "CUDA_DEVICE_MEMORY_LIMIT_0=1200m") {
		t.Fatalf("victim's limits file on %s: %q", node, limits)
	}
}

// A trap pod with a placement of its own (allocating, an old bind time, the GPU, 0 MiB) that names
// its node itself is refused with an event; the victim scheduled after it is allocated normally into
// its own directory, and deleting the trap sweeps nothing of the victim's.
func TestKindTrapPod(t *testing.T) {
	e := need(t)
	ctx := t.Context()
	node := e.c.Worker(fileWorker)
	ns := unguarded(t, e)
	createPod(t, e, trustPod(ns, "trap", node, 1, map[string]string{
		annotations.BindPhase: string(annotations.PhaseAllocating), annotations.BindTime: "1", annotations.VGPUNode: node,
		annotations.DevicesToAllocate: gpuDevs(e.gpuUUID, 0).Encode(),
	}))
	waitRefused(ctx, t, e, ns, "trap", "placement not named by the node lock")
	victim := gpuPodNamed(t, e, fileWorker, e.gpuUUID, podName(t)+"-victim", 1000, nil)
	p, err := e.c.Kube.CoreV1().Pods(testNamespace).Get(ctx, victim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := fmt.Sprintf("%s/containers/%s_main", vgpuDir, p.UID)
	wantRefused(t, "exec", probe(t, victim, "exec", 4096), 1000) // its first CUDA process creates usage.cache
	if out, err := e.c.NodeExec(ctx, node, "test", "-f", dir+"/usage.cache"); err != nil {
		t.Fatalf("the victim's usage region %s on %s: %v %s", dir, node, err, out)
	}
	if err := e.c.DeletePod(ctx, ns, "trap"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(12 * time.Second) // the monitor's grace (5 s) and a few sweeps (2 s) in the test bed
	if out, err := e.c.NodeExec(ctx, node, "test", "-f", dir+"/usage.cache"); err != nil {
		t.Fatalf("the victim's cache directory %s on %s after the trap's deletion: %v %s", dir, node, err, out)
	}
	wantRefused(t, "exec", probe(t, victim, "exec", 4096), 1000)
}

// The chart's admission policy: a pod's owner (a user with rights on pods in its namespace and
// nothing else) cannot create a pod with a placement, nor set or change one later; the scheduler,
// acting as its service account, places the same pod, which then runs capped.
func TestKindPlacementAdmissionPolicy(t *testing.T) {
	e := need(t)
	ctx := t.Context()
	const owner = "limitbed-tenant"
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "limitbed-tenant", Namespace: testNamespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "patch", "update", "delete"}}}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "limitbed-tenant", Namespace: testNamespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: owner}}}
	if _, err := e.c.Kube.RbacV1().Roles(testNamespace).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := e.c.Kube.RbacV1().RoleBindings(testNamespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tenant, err := e.c.Impersonate(owner)
	if err != nil {
		t.Fatal(err)
	}
	name := podName(t)
	placed := trustPod(testNamespace, name, "", 3000, map[string]string{
		annotations.BindPhase: string(annotations.PhaseAllocating), annotations.DevicesToAllocate: gpuDevs(e.gpuUUID, 0).Encode()})
	const why = "only the scheduler chooses the placement of a pod: " + owner + " may not set, change or remove"
	// The policy is the API server's as soon as its informer has it: give it a moment.
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := tenant.CoreV1().Pods(testNamespace).Create(ctx, placed, metav1.CreateOptions{})
		if err == nil {
			_ = e.c.DeletePod(ctx, testNamespace, name)
			return false, nil
		}
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), why), nil
	})
	if err != nil {
		t.Fatalf("the owner created a pod with its own placement: %v", err)
	}
	pod, err := tenant.CoreV1().Pods(testNamespace).Create(ctx, trustPod(testNamespace, name, "", 3000, nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the owner cannot create a plain GPU pod: %v", err)
	}
	t.Cleanup(func() { _ = e.c.DeletePod(context.WithoutCancel(ctx), testNamespace, name) })
	patch := func(key, value string) error {
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
		_, err := tenant.CoreV1().Pods(testNamespace).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	}
	if err := patch(annotations.DevicesToAllocate, gpuDevs(e.gpuUUID, 0).Encode()); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), annotations.DevicesToAllocate) {
		t.Fatalf("the owner set a placement: %v", err)
	}
	if err := patch("team", "ml"); err != nil {
		t.Fatalf("the owner cannot set an annotation of its own: %v", err)
	}
	if err := kindcluster.Bind(ctx, e.c.Scheduler, pod, e.c.Worker(fileWorker), gpuDevs(e.gpuUUID, 3000)); err != nil {
		t.Fatalf("the scheduler could not place the pod: %v", err)
	}
	if _, err := e.c.WaitPodRunning(ctx, testNamespace, name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := patch(annotations.BindPhase, string(annotations.PhaseFailed)); !apierrors.IsForbidden(err) {
		t.Fatalf("the owner changed the bind phase: %v", err)
	}
	pc, err := e.c.PodContainer(ctx, testNamespace, name, "main")
	if err != nil {
		t.Fatal(err)
	}
	if limits := nodeLimitsFile(t, e, e.c.Worker(fileWorker), pc); !strings.Contains(limits, "CUDA_DEVICE_MEMORY_LIMIT_0=3000m") {
		t.Fatalf("limits file: %q", limits)
	}
}
