//go:build kind

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/limitbed/limitbed/harness/sandbox"
)

// The offline node image builds CoreDNS with only the plugins of kubeadm's Corefile and runs
// kube-proxy from its own rootfs: the cluster's DNS must still work end to end — the coredns
// Deployment available, and a pod resolving the API server's Service name through the cluster DNS
// Service (kube-proxy's rules), as every in-cluster client relies on.
func TestKindClusterDNS(t *testing.T) {
	e := need(t)
	ctx := t.Context()
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := e.c.Kube.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return d.Status.AvailableReplicas > 0, nil
	})
	if err != nil {
		t.Fatalf("the coredns Deployment did not become available within 2 min: %v", err)
	}
	pc := gpuPod(t, e, 0, 1000, nil)
	const name = "kubernetes.default.svc.cluster.local"
	var res sandbox.ExecResult
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		res, err = pc.Exec(ctx, []string{"getent", "hosts", name}, sandboxOpts())
		return err == nil && res.ExitCode == 0, nil
	})
	if err != nil {
		t.Fatalf("getent hosts %s in a pod: exit %d, stdout %q, stderr %q", name, res.ExitCode, res.Stdout, res.Stderr)
	}
	if !strings.Contains(string(res.Stdout), name) {
		t.Fatalf("getent hosts %s printed %q", name, res.Stdout)
	}
}
