package kindcluster

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/limitbed/limitbed/harness/scheduler"
	"github.com/limitbed/limitbed/plugin/annotations"
)

// SchedulerName is the scheduler GPU pods name, so that the default scheduler leaves them to Bind.
const SchedulerName = "hami-scheduler"

// Bind does what HAMi's scheduler does for a pod it placed (harness/scheduler): take the node's
// hami.io/mutex.lock, record the decision (hami.io/vgpu-node, hami.io/vgpu-time,
// hami.io/vgpu-devices-to-allocate and hami.io/vgpu-devices-allocated, one entry per container,
// init containers first), set hami.io/bind-phase=allocating and hami.io/bind-time, and bind the pod
// to the node. The device plugin on that node then finds the pod in Allocate.
func Bind(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, node string, devs annotations.PodDevices) error {
	// A pod still allocating holds the node until its kubelet calls Allocate, which waits for the
	// plugin to (re)register: give it as long as WaitPodRunning gives a pod.
	return scheduler.Bind(ctx, kube, pod, node, devs, scheduler.Options{LockWait: 2 * time.Minute})
}
