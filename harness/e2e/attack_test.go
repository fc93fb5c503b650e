//go:build kind

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limitbed/limitbed/harness/kindcluster"
)

// The attack suite of docs/attacks.md on a real kubelet and container runtime: root in a file-mode
// pod attacks /overrideEnv, its own environment and its read-write cache directory, next to a
// neighbour pod on the same node. The tenant stays capped at 3000 MiB, the neighbour at its own
// 2000 MiB, and the node's monitor keeps reporting the neighbour while it rejects the tenant's file.
func TestKindTenantAttacks(t *testing.T) {
	e := need(t)
	node := e.c.Worker(fileWorker)
	tenant := gpuPodNamed(t, e, fileWorker, e.gpuUUID, podName(t)+"-tenant", 3000, nil)
	neighbour := gpuPodNamed(t, e, fileWorker, e.gpuUUID, podName(t)+"-neighbour", 2000, nil)
	limits := nodeLimitsFile(t, e, node, tenant)
	// The neighbour's region exists (and the monitor reports it) once a CUDA process has run there.
	wantRefused(t, "neighbour exec before the attacks", probe(t, neighbour, "exec", 2500), 2000)

	t.Run("overrideEnv", func(t *testing.T) {
		for _, attack := range []string{
			"echo CUDA_DEVICE_MEMORY_LIMIT_0=0 > /overrideEnv",
			"echo CUDA_DEVICE_MEMORY_LIMIT_0=0 >> /overrideEnv",
			"truncate -s 0 /overrideEnv",
			"mv /overrideEnv /overrideEnv.old",
			"rm /overrideEnv",
			"mount -o remount,rw /overrideEnv",
			"umount /overrideEnv",
			"echo CUDA_DEVICE_MEMORY_LIMIT_0=0 > /tmp/mine && mount --bind /tmp/mine /overrideEnv",
		} {
			res, err := tenant.Exec(t.Context(), []string{"sh", "-c", attack}, sandboxOpts())
			if err != nil || res.ExitCode == 0 {
				t.Errorf("%q succeeded as root in the pod (err %v)", attack, err)
			}
		}
		if got := nodeLimitsFile(t, e, node, tenant); got != limits {
			t.Errorf("the node's limits file changed: %q, was %q", got, limits)
		}
		wantRefused(t, "su -", probe(t, tenant, "su -", 4096), 3000)
	})

	t.Run("environment", func(t *testing.T) {
		for _, env := range []string{"CUDA_DISABLE_CONTROL=true", "CUDA_DEVICE_MEMORY_LIMIT_0=0 CUDA_DEVICE_MEMORY_LIMIT=0"} {
			for _, method := range []string{"exec", "su -"} {
				wantRefused(t, method+" "+env, probeWithEnv(t, tenant, method, env, 4096), 3000)
			}
		}
	})

	t.Run("usage.cache", func(t *testing.T) {
		uid := podUID(t, e, tenant)
		for _, a := range []struct{ shell, reason string }{
			{"mkfifo /usr/local/vgpu/usage.cache", "not_regular"},
			{"ln -s ../../../../../etc/shadow /usr/local/vgpu/usage.cache", "symlink"},
			{"truncate -s 1T /usr/local/vgpu/usage.cache", "size"},
		} {
			if res, err := tenant.Exec(t.Context(), []string{"sh", "-c", "rm -f /usr/local/vgpu/usage.cache && " + a.shell}, sandboxOpts()); err != nil || res.ExitCode != 0 {
				t.Fatalf("%q: exit %d, err %v, stderr %s", a.shell, res.ExitCode, err, res.Stderr)
			}
			wantRefused(t, "exec after "+a.shell, probe(t, tenant, "exec", 4096), 3000)
			metrics := scrapeMonitor(t, e, node)
			if want := fmt.Sprintf(`hami_container_region_file_rejected{container="main",pod_uid="%s",reason="%s"} 1`, uid, a.reason); !strings.Contains(metrics, want) {
				t.Errorf("after %q the monitor does not report %s", a.shell, want)
			}
			if want := fmt.Sprintf(`hami_container_region_memory_limit_bytes{container="main",device_index="0",pod_uid="%s"} 2.097152e+09`, podUID(t, e, neighbour)); !strings.Contains(metrics, want) {
				t.Errorf("after %q the monitor no longer reports the neighbour (%s)", a.shell, want)
			}
		}
	})

	wantRefused(t, "neighbour exec", probe(t, neighbour, "exec", 2500), 2000)
}

// probeEnv is probe with variables set in the probe's own environment (after the launch method).
func podUID(t *testing.T, e *testEnv, pc *kindcluster.PodContainer) string {
	t.Helper()
	p, err := e.c.Kube.CoreV1().Pods(pc.Namespace).Get(t.Context(), pc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(p.UID)
}

// scrapeMonitor fetches /metrics from the monitor on node through the API server's pod proxy; the
// scrape must come back, whatever the tenant left in its cache directory.
func scrapeMonitor(t *testing.T, e *testEnv, node string) string {
	t.Helper()
	body, err := monitorMetrics(t.Context(), e, node)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// monitorMetrics is scrapeMonitor returning its error.
func monitorMetrics(ctx context.Context, e *testEnv, node string) (string, error) {
	pods, err := e.c.Kube.CoreV1().Pods(e.release.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + node, LabelSelector: "app.kubernetes.io/name=limitbed"})
	if err != nil || len(pods.Items) == 0 {
		return "", fmt.Errorf("no limitbed pod on %s (%v)", node, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	body, err := e.c.Kube.CoreV1().Pods(e.release.Namespace).ProxyGet("http", pods.Items[0].Name, "9394", "/metrics", nil).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("scrape the monitor on %s: %w", node, err)
	}
	return string(body), nil
}
