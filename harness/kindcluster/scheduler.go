package kindcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/limitbed/limitbed/plugin/annotations"
)

// SchedulerName is the scheduler GPU pods name, so that the default scheduler leaves them to Bind.
const SchedulerName = "hami-scheduler"

// Bind does what HAMi's scheduler does for a pod it placed: Filter records the decision
// (hami.io/vgpu-node, hami.io/vgpu-time, hami.io/vgpu-devices-to-allocate and
// hami.io/vgpu-devices-allocated, one entry per container, init containers first), then Bind sets
// hami.io/bind-phase=allocating and hami.io/bind-time and binds the pod to the node. The device
// plugin on that node then finds the pod in Allocate.
func Bind(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, node string, devs annotations.PodDevices) error {
	want := len(pod.Spec.InitContainers) + len(pod.Spec.Containers)
	if len(devs) != want {
		return fmt.Errorf("bind %s/%s: %d device entries for %d containers", pod.Namespace, pod.Name, len(devs), want)
	}
	now := strconv.FormatInt(time.Now().Unix(), 10)
	enc := devs.Encode()
	filter := map[string]string{
		annotations.VGPUNode:          node,
		"hami.io/vgpu-time":           now,
		annotations.DevicesToAllocate: enc,
		annotations.DevicesAllocated:  enc,
	}
	if err := patchAnnotations(ctx, kube, pod, filter); err != nil {
		return fmt.Errorf("bind %s/%s (filter): %w", pod.Namespace, pod.Name, err)
	}
	bind := map[string]string{annotations.BindPhase: string(annotations.PhaseAllocating), annotations.BindTime: now}
	if err := patchAnnotations(ctx, kube, pod, bind); err != nil {
		return fmt.Errorf("bind %s/%s (bind phase): %w", pod.Namespace, pod.Name, err)
	}
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	if err := kube.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("bind %s/%s to %s: %w", pod.Namespace, pod.Name, node, err)
	}
	return nil
}

func patchAnnotations(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, ann map[string]string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	_, err = kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}
