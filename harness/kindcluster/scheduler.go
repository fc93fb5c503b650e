package kindcluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/limitbed/limitbed/harness/scheduler"
	"github.com/limitbed/limitbed/plugin/annotations"
)

// SchedulerName is the scheduler GPU pods name, so that the default scheduler leaves them to Bind.
const SchedulerName = "hami-scheduler"

// The HAMi scheduler's service account, as HAMi's chart creates it (and as the limitbed chart's
// admission policy trusts it by default: admissionPolicy.schedulerServiceAccount).
const (
	SchedulerNamespace      = "kube-system"
	SchedulerServiceAccount = "hami-scheduler"
)

// SchedulerUser is the API server's name of the scheduler's service account.
const SchedulerUser = "system:serviceaccount:" + SchedulerNamespace + ":" + SchedulerServiceAccount

// Bind does what HAMi's scheduler does for a pod it placed (harness/scheduler): take the node's
// hami.io/mutex.lock, record the decision (hami.io/vgpu-node, hami.io/vgpu-time,
// hami.io/vgpu-devices-to-allocate and hami.io/vgpu-devices-allocated, one entry per container,
// init containers first), set hami.io/bind-phase=allocating and hami.io/bind-time, and bind the pod
// to the node. The device plugin on that node then finds the pod in Allocate. kube should be the
// cluster's Scheduler client: the admission policy refuses placement annotations from anyone else.
func Bind(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, node string, devs annotations.PodDevices) error {
	// A pod still allocating holds the node until its kubelet calls Allocate, which waits for the
	// plugin to (re)register: give it as long as WaitPodRunning gives a pod.
	return scheduler.Bind(ctx, kube, pod, node, devs, scheduler.Options{LockWait: 2 * time.Minute})
}

// schedulerIdentity creates the scheduler's service account and the rights HAMi's scheduler has for
// its protocol (pods: read, patch, bind; nodes: read, patch for the lock), and returns a client that
// acts as it (impersonation by the cluster's admin), so the harness plays the scheduler under the
// scheduler's own identity.
func schedulerIdentity(ctx context.Context, admin kubernetes.Interface, cfg *rest.Config) (kubernetes.Interface, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: SchedulerServiceAccount, Namespace: SchedulerNamespace}}
	if _, err := admin.CoreV1().ServiceAccounts(SchedulerNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("scheduler service account: %w", err)
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "limitbed-harness-hami-scheduler"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch", "update"}},
			{APIGroups: []string{""}, Resources: []string{"pods/binding"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}},
		},
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("scheduler cluster role: %w", err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: SchedulerServiceAccount, Namespace: SchedulerNamespace}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("scheduler cluster role binding: %w", err)
	}
	return impersonate(cfg, SchedulerUser)
}

// Impersonate returns a client that acts as user (the cluster admin's impersonation), e.g. a pod's
// owner with only the rights a test gives it.
func (c *Cluster) Impersonate(user string) (kubernetes.Interface, error) {
	return impersonate(c.REST, user)
}

func impersonate(cfg *rest.Config, user string) (kubernetes.Interface, error) {
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: user}
	kube, err := kubernetes.NewForConfig(as)
	if err != nil {
		return nil, fmt.Errorf("client acting as %s: %w", user, err)
	}
	return kube, nil
}
