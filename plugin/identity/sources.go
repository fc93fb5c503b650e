package identity

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// The two sources' clients, the API server's and the kubelet's, are plugin/identity/kubesource:
// this package holds the types and the judgement only, so that a reader of snapshots (the
// scheduler's policy, the monitor's accounting) links no client.

// PodSource lists the pods the API server has on this node.
type PodSource interface {
	NodePods(ctx context.Context) ([]corev1.Pod, error)
}

// DeviceSource lists the devices the kubelet handed to each container.
type DeviceSource interface {
	ContainerDevices(ctx context.Context) ([]ContainerDevices, error)
}

// ContainerDevices is one container's devices of one resource, as the
// kubelet's pod-resources API reports them (which names pods by namespace
// and name, not UID).
type ContainerDevices struct {
	Namespace, Pod, Container string
	Resource                  string
	DeviceIDs                 []string
}
