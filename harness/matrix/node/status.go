package node

import (
	"context"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodResourcesSocket is the node's kubelet pod-resources API (what each container holds).
func (n *Node) PodResourcesSocket() string { return n.podRes.Socket }

// ContainerStarted records that pod's container runs as runtimeID ("docker://<id>"), as the
// kubelet writes it into the pod's status: what node agents map a process's cgroup to.
func (n *Node) ContainerStarted(ctx context.Context, pod, runtimeID string) error {
	if n.api != nil {
		return n.api.SetContainerID("default", pod, ContainerName, runtimeID)
	}
	p, err := n.kube.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("pod %s: %w", pod, err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, ContainerID: runtimeID, Ready: true}}
	if _, err := n.kube.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("pod %s: status: %w", pod, err)
	}
	return nil
}

// WriteKubeconfig writes a kubeconfig of the node's HTTP API server (Config.HTTPAPI or an
// external plugin) to path.
func (n *Node) WriteKubeconfig(path string) error {
	if n.api == nil {
		return fmt.Errorf("node: the API server is in process only; start the node with HTTPAPI")
	}
	return n.api.WriteKubeconfig(path)
}

// agentDir is where a node agent (the monitor) keeps its files.
func (n *Node) agentDir(name string) string { return filepath.Join(n.cfg.Dir, name) }
