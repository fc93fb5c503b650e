package kindcluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/podexec"
)

// PodContainer is one container of a running pod, driven through the API server's exec and logs,
// as kubectl exec and kubectl logs do. It implements sandbox.Container, so plugin/launch's
// methods (exec, bash -c, su -, sudo, ssh, cron, …) run in pods unchanged.
type PodContainer struct {
	c                          *Cluster
	Namespace, Name, Container string
	ip                         string
}

var _ sandbox.Container = (*PodContainer)(nil)

// PodContainer returns the container of a pod that is already running.
func (c *Cluster) PodContainer(ctx context.Context, ns, name, container string) (*PodContainer, error) {
	p, err := c.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", ns, name, err)
	}
	return &PodContainer{c: c, Namespace: ns, Name: name, Container: container, ip: p.Status.PodIP}, nil
}

// Exec runs cmd like kubectl exec: the container's environment plus opts.Env (through env(1)),
// as opts.User through runuser(1) when set (the API has no user field).
func (p *PodContainer) Exec(ctx context.Context, cmd []string, opts sandbox.ExecOptions) (sandbox.ExecResult, error) {
	return podexec.Target{Kube: p.c.Kube, REST: p.c.REST, Namespace: p.Namespace, Pod: p.Name, Container: p.Container}.Exec(ctx, cmd, opts)
}

// ReadFile returns a file's content from inside the container.
func (p *PodContainer) ReadFile(ctx context.Context, path string) ([]byte, error) {
	res, err := p.Exec(ctx, []string{"cat", path}, sandbox.ExecOptions{})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("read %s in %s: exit %d: %s", path, p, res.ExitCode, res.Stderr)
	}
	return res.Stdout, nil
}

// Logs returns the container's log.
func (p *PodContainer) Logs(ctx context.Context) ([]byte, error) {
	b, err := p.c.Kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: p.Container}).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("logs of %s: %w", p, err)
	}
	return b, nil
}

func (p *PodContainer) Addr() string { return p.ip }
func (p *PodContainer) Supports(f sandbox.Feature) bool {
	return f == sandbox.FeatureSSH || f == sandbox.FeatureCron
}
func (p *PodContainer) Backend() string { return "kind" }
func (p *PodContainer) String() string  { return p.Namespace + "/" + p.Name + "/" + p.Container }

// Stop deletes the pod and waits until it is gone.
func (p *PodContainer) Stop(ctx context.Context) error {
	return p.c.DeletePod(ctx, p.Namespace, p.Name)
}

// DeletePod deletes a pod (grace period 0) and waits until the API no longer has it.
func (c *Cluster) DeletePod(ctx context.Context, ns, name string) error {
	zero := int64(0)
	err := c.Kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete pod %s/%s: %w", ns, name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("wait for pod %s/%s to go: %w", ns, name, err)
	}
	return nil
}

// WaitPodRunning waits until every container of the pod runs, returning the pod; the error names
// the waiting reason (e.g. UnexpectedAdmissionError from a failed Allocate) when it times out.
func (c *Cluster) WaitPodRunning(ctx context.Context, ns, name string, timeout time.Duration) (*corev1.Pod, error) {
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod failed: %s: %s", p.Status.Reason, p.Status.Message)
		}
		if p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Running == nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return last, fmt.Errorf("wait for pod %s/%s to run: %w (%s)", ns, name, err, podState(last))
	}
	return last, nil
}

func podState(p *corev1.Pod) string {
	if p == nil {
		return "never seen"
	}
	s := fmt.Sprintf("phase %s %s %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			s += fmt.Sprintf("; %s waiting: %s %s", cs.Name, w.Reason, w.Message)
		}
	}
	return s
}
