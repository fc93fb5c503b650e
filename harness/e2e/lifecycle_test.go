//go:build kind

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The monitor removes a dead pod's directory and its .limits file (grace 5 s in this cluster).
func TestKindPodDeletionCleansUp(t *testing.T) {
	e := need(t)
	node := e.c.Worker(fileWorker)
	pc := gpuPod(t, e, fileWorker, 3000, nil)
	p, err := e.c.Kube.CoreV1().Pods(pc.Namespace).Get(t.Context(), pc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	entry := fmt.Sprintf("%s/containers/%s_main", vgpuDir, p.UID)
	if out, err := e.c.NodeExec(t.Context(), node, "ls", "-d", entry, entry+".limits"); err != nil {
		t.Fatalf("before deletion: %v", out)
	}
	if err := e.c.DeletePod(t.Context(), pc.Namespace, pc.Name); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		out, _ := e.c.NodeExec(ctx, node, "sh", "-c", "ls -d "+entry+"* 2>/dev/null; true")
		return strings.TrimSpace(string(out)) == "", nil
	})
	if err != nil {
		out, _ := e.c.NodeExec(t.Context(), node, "ls", "-la", vgpuDir+"/containers")
		t.Fatalf("the monitor left %s and its .limits file after the pod was deleted: %v\n%s", entry, err, out)
	}
}

// Restarting the kubelet drops every plugin registration; the plugin must notice the new
// kubelet.sock, register again, and allocate for new pods with limits.
func TestKindKubeletRestart(t *testing.T) {
	e := need(t)
	node := e.c.Worker(fileWorker)
	since := time.Now()
	if _, err := e.c.NodeExec(t.Context(), node, "systemctl", "restart", "kubelet"); err != nil {
		t.Fatal(err)
	}
	if err := waitPluginRegistered(t.Context(), e, node, since); err != nil {
		t.Fatal(err)
	}
	pc := gpuPod(t, e, fileWorker, 3000, nil)
	wantRefused(t, "ssh", probe(t, pc, "ssh", 4096), 3000)
}

// A running pod keeps its limits while the plugin pod is replaced: the file is on the node and
// bind-mounted, not served by the plugin.
func TestKindPluginRestartKeepsLimits(t *testing.T) {
	e := need(t)
	node := e.c.Worker(fileWorker)
	pc := gpuPod(t, e, fileWorker, 3000, nil)
	if err := restartPluginPod(t.Context(), e, node); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "ssh", probe(t, pc, "ssh", 4096), 3000)
	wantRefused(t, "exec", probe(t, pc, "exec", 4096), 3000)
}

// Rollback: the operator sets limitDelivery: env (and drops the node override); after the plugin
// rollout, recreated pods get env delivery everywhere: no file, and ssh sessions run unlimited again.
// Runs last: it changes the release.
func TestKindRollbackToEnvMode(t *testing.T) {
	e := need(t)
	ctx := t.Context()
	since := time.Now()
	if err := e.c.HelmUpgrade(ctx, e.release, chartValues("env", false), 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Restore file mode and wait until every worker's plugin has registered again: until then
		// the kubelet still lists the old plugin's devices as unhealthy, and the next test's pod
		// would be rejected at admission.
		restored := time.Now()
		bg := context.WithoutCancel(ctx)
		if err := e.c.HelmUpgrade(bg, e.release, chartValues("file", true), 3*time.Minute); err != nil {
			t.Errorf("restore file mode: %v", err)
			return
		}
		for _, w := range []int{fileWorker, envWorker, migWorker} {
			if err := waitPluginRegistered(bg, e, e.c.Worker(w), restored); err != nil {
				t.Errorf("after restoring file mode: %v", err)
			}
		}
	})
	node := e.c.Worker(fileWorker)
	if err := waitPluginRegistered(ctx, e, node, since); err != nil {
		t.Fatal(err)
	}
	pc := gpuPod(t, e, fileWorker, 3000, nil)
	if limits := nodeLimitsFile(t, e, node, pc); limits != "" {
		t.Errorf("env mode after rollback wrote a limits file: %q", limits)
	}
	wantRefused(t, "exec", probe(t, pc, "exec", 4096), 3000)
	wantGranted(t, "ssh", probe(t, pc, "ssh", 4096))
}
