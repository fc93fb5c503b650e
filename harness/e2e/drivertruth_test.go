//go:build kind

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/limitbed/limitbed/harness/hold"
	"github.com/limitbed/limitbed/harness/kindcluster"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/doctor"
	"github.com/limitbed/limitbed/plugin/launch"
)

// The monitor's driver-truth period in this cluster (the chart's monitor.accountingInterval) and its
// Event reasons (plugin/monitor, which this package does not link: it would bring NVML along).
const (
	accountingPeriod      = time.Second
	reasonOverLimit       = "GPUMemoryOverLimit"
	reasonOverLimitKilled = "GPUMemoryOverLimitKilled"
)

// The attack suite's bypasses on a real kubelet and container runtime, caught by the node's
// monitor from the driver's process list (docs/attacks.md): LD_PRELOAD of the driver, glibc's own
// dlsym, dlmopen, and the region's counters rewritten by root in the tenant's pod (its limit
// rewritten is refused by the library itself), next
// to a neighbour pod on the same GPU. With enforcement report (the cluster's) the tenant is found
// over within two periods and a Warning Event on it is readable through the API; with the file
// worker's enforcement set to kill (its config.json entry, the monitor restarted) each offending
// process is SIGKILLed within two periods of its allocation, and the tenant's honest process and
// the neighbour keep running, with no Event on the neighbour.
func TestKindDriverTruth(t *testing.T) {
	e := need(t)
	node := e.c.Worker(fileWorker)
	tenant := gpuPodNamed(t, e, fileWorker, e.gpuUUID, podName(t)+"-tenant", 3000, nil)
	neighbour := gpuPodNamed(t, e, fileWorker, e.gpuUUID, podName(t)+"-neighbour", 2000, nil)
	tenantUID, neighbourUID := podUID(t, e, tenant), podUID(t, e, neighbour)
	honest := startHold(t, tenant, "honest", 1000, "symbols")
	other := startHold(t, neighbour, "neighbour", 1000, "symbols")
	waitJudged(t, e, node, tenantUID, false)
	waitJudged(t, e, node, neighbourUID, false)
	const preload = "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libcuda.so.1"

	t.Run("report", func(t *testing.T) {
		b := startHold(t, tenant, "report-preload", 4096, "symbols", preload)
		granted := grantedAt(t, b)
		seen := waitJudged(t, e, node, tenantUID, true)
		if took := seen.Sub(granted); took > 2*accountingPeriod {
			t.Errorf("found over %v after the allocation, want within two periods (%v)", took, 2*accountingPeriod)
		} else {
			t.Logf("found over %v after the allocation", took.Round(time.Millisecond))
		}
		if running, err := b.Running(t.Context()); err != nil || !running {
			t.Errorf("report killed the bypass (running %v, %v)", running, err)
		}
		// limitbed-doctor --node names the container over its limit, with the driver's count
		// beside the region's.
		cl, err := doctor.NewAPICluster(e.c.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := (&doctor.Doctor{Cluster: cl, PluginNamespace: e.release.Namespace}).Node(t.Context(), node)
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := rep.Check("driver-truth"); !ok || c.Verdict != doctor.Fail || !strings.Contains(c.Detail, "default/"+tenant.Name+"/main on "+e.gpuUUID) {
			t.Errorf("doctor --node: driver-truth %+v", c)
		}
		evs := podEvents(t, e, tenant)
		if len(evs) != 1 || evs[0].Reason != reasonOverLimit || evs[0].Type != corev1.EventTypeWarning ||
			!strings.Contains(evs[0].Message, "does not go through libvgpu.so") {
			t.Errorf("events of the tenant: %+v", evs)
		}
		b.Stop(t.Context())
		waitJudged(t, e, node, tenantUID, false)
	})

	setNodeEnforcement(t, e, node, v1.EnforcementKill)
	waitJudged(t, e, node, tenantUID, false)
	for _, c := range []struct {
		name, api string
		mib       int
		env       []string
		before    string // a shell line run as root in the tenant first
	}{
		{"kill-preload", "symbols", 4096, []string{preload}, ""},
		{"kill-dlvsym", "dlvsym", 4096, nil, ""},
		{"kill-dlmopen", "dlmopen", 4096, nil, ""},
		{"kill-counters", "symbols", 2500, nil, "dd if=/dev/zero of=/usr/local/vgpu/usage.cache bs=1 seek=320 count=8 conv=notrunc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.before != "" {
				if res, err := tenant.Exec(t.Context(), []string{"sh", "-c", c.before + " 2>/dev/null"}, sandboxOpts()); err != nil || res.ExitCode != 0 {
					t.Fatalf("%s: exit %d, %v", c.before, res.ExitCode, err)
				}
			}
			b := startHold(t, tenant, c.name, c.mib, c.api, c.env...)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			rc, err := b.Ended(ctx)
			if err != nil || rc != "137" {
				t.Fatalf("the bypass ended with %q (%v), want 137 (SIGKILL)", rc, err)
			}
			granted, ended := grantedAt(t, b), endedAt(t, b)
			if took := ended.Sub(granted); took > 2*accountingPeriod {
				t.Errorf("killed %v after its allocation, want within two periods (%v)", took, 2*accountingPeriod)
			} else {
				t.Logf("killed %v after its allocation", took.Round(time.Millisecond))
			}
			for _, h := range []*hold.Holder{honest, other} {
				if running, err := h.Running(t.Context()); err != nil || !running {
					t.Fatalf("%s was killed (running %v, %v)", h.Name, running, err)
				}
			}
			waitJudged(t, e, node, tenantUID, false)
		})
	}
	killed := 0
	for _, ev := range podEvents(t, e, tenant) {
		if ev.Reason == reasonOverLimitKilled {
			killed++
		}
	}
	if killed != 4 {
		t.Errorf("%d %s events on the tenant, want 4", killed, reasonOverLimitKilled)
	}
	// The region's limit rewritten to none is no longer a way past the library (it enforces its
	// own limits file): refused, and nobody over.
	if res, err := tenant.Exec(t.Context(), []string{"sh", "-c", `printf "\377\377\377\377\377\377\377\377" | dd of=/usr/local/vgpu/usage.cache bs=1 seek=64 conv=notrunc 2>/dev/null`}, sandboxOpts()); err != nil || res.ExitCode != 0 {
		t.Fatalf("rewrite the region's limit: exit %d, %v", res.ExitCode, err)
	}
	wantRefused(t, "exec after the region's limit was rewritten", probe(t, tenant, "exec", 4096), 3000)
	waitJudged(t, e, node, tenantUID, false)
	if evs := podEvents(t, e, neighbour); len(evs) != 0 {
		t.Errorf("events on the neighbour: %+v", evs)
	}
	waitJudged(t, e, node, neighbourUID, false)
}

// startHold starts a holder in c and fails the test unless its allocation was granted.
func startHold(t *testing.T, c *kindcluster.PodContainer, name string, mib int, api string, env ...string) *hold.Holder {
	t.Helper()
	return holdSpec(t, c, hold.Spec{Name: name, MiB: mib, API: api, Env: env})
}

// holdSpec is startHold of a whole spec (its cudaprobe is the node's).
func holdSpec(t *testing.T, c *kindcluster.PodContainer, spec hold.Spec) *hold.Holder {
	t.Helper()
	name, mib := spec.Name, spec.MiB
	spec.Cudaprobe = cudaprobe
	m, err := launch.Lookup("exec")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Second)
	defer cancel()
	h, err := hold.Start(ctx, c, m, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Stop(context.Background()) })
	var p struct {
		Requested int `json:"requested_mib"`
		Granted   int `json:"granted_mib"`
	}
	if err := json.Unmarshal(h.Report, &p); err != nil || p.Granted != p.Requested {
		t.Fatalf("%s: %s (%v): want %d MiB granted", name, h.Report, err, mib)
	}
	return h
}

func grantedAt(t *testing.T, h *hold.Holder) time.Time { return stamp(t, h.GrantedAt) }

func endedAt(t *testing.T, h *hold.Holder) time.Time { return stamp(t, h.EndedAt) }

func stamp(t *testing.T, f func(context.Context) (time.Time, error)) time.Time {
	t.Helper()
	at, err := f(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// waitJudged polls the node's monitor (20 ms apart) until it judges the pod over (or within) its
// limit by the driver's count, and returns when it first saw that.
func waitJudged(t *testing.T, e *testEnv, node, uid string, over bool) time.Time {
	t.Helper()
	want := regexp.MustCompile(`(?m)^hami_container_driver_memory_over_limit\{[^}]*pod_uid="` + regexp.QuoteMeta(uid) + `"[^}]*\} (\S+)$`)
	var last string
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		body := scrapeMonitor(t, e, node)
		if m := want.FindStringSubmatch(body); m != nil {
			if v, _ := strconv.ParseFloat(m[1], 64); (v == 1) == over {
				return time.Now()
			}
			last = m[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("pod %s not judged over=%v by the monitor on %s within a minute (last: %q)", uid, over, node, last)
	return time.Time{}
}

// podEvents lists the monitor's Events on pc's pod through the API server (the kubelet's own
// Pulled, Created, Started are left out).
func podEvents(t *testing.T, e *testEnv, pc *kindcluster.PodContainer) []corev1.Event {
	t.Helper()
	l, err := e.c.Kube.CoreV1().Events(pc.Namespace).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pc.Name})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, ev := range l.Items {
		if ev.Source.Component == "vgpu-monitor" {
			out = append(out, ev)
		}
	}
	return out
}

// setNodeEnforcement sets node's enforcement in the chart's config.json (a nodeconfig entry) and
// replaces the node's plugin pod so its monitor reads it; the entry is removed (and the pod
// replaced again) when the test ends.
func setNodeEnforcement(t *testing.T, e *testEnv, node string, enf v1.Enforcement) {
	t.Helper()
	edit := func(ctx context.Context, add bool) error {
		cms := e.c.Kube.CoreV1().ConfigMaps(e.release.Namespace)
		cm, err := cms.Get(ctx, e.release.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var pc v1.PluginConfig
		if err := json.Unmarshal([]byte(cm.Data["config.json"]), &pc); err != nil {
			return fmt.Errorf("config.json: %w", err)
		}
		kept := pc.NodeConfig[:0]
		for _, nc := range pc.NodeConfig {
			if nc.Name != node || nc.Enforcement == nil {
				kept = append(kept, nc)
			}
		}
		pc.NodeConfig = kept
		if add {
			pc.NodeConfig = append(pc.NodeConfig, v1.NodeConfig{Name: node, Enforcement: &enf})
		}
		b, err := json.MarshalIndent(pc, "", "  ")
		if err != nil {
			return err
		}
		cm.Data["config.json"] = string(b)
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return err
		}
		return restartPluginPod(ctx, e, node)
	}
	if err := edit(t.Context(), true); err != nil {
		t.Fatalf("enforcement %s on %s: %v", enf, node, err)
	}
	t.Cleanup(func() {
		if err := edit(context.Background(), false); err != nil {
			t.Errorf("restore the enforcement of %s: %v", node, err)
		}
	})
}

// restartPluginPod deletes the chart's pod on node and waits until its replacement runs, its
// plugin registered with the kubelet and its monitor completed a driver-truth pass.
func restartPluginPod(ctx context.Context, e *testEnv, node string) error {
	sel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + node, LabelSelector: "app.kubernetes.io/name=limitbed"}
	pods, err := e.c.Kube.CoreV1().Pods(e.release.Namespace).List(ctx, sel)
	if err != nil || len(pods.Items) != 1 {
		return fmt.Errorf("plugin pod on %s: %v (%d found)", node, err, len(pods.Items))
	}
	old := pods.Items[0]
	since := time.Now()
	if err := e.c.DeletePod(ctx, old.Namespace, old.Name); err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := e.c.Kube.CoreV1().Pods(old.Namespace).List(ctx, sel)
		if err != nil || len(l.Items) != 1 || l.Items[0].UID == old.UID {
			return false, nil
		}
		for _, s := range l.Items[0].Status.ContainerStatuses {
			if !s.Ready {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("plugin pod on %s did not come back: %w", node, err)
	}
	if err := waitPluginRegistered(ctx, e, node, since); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		body, err := monitorMetrics(ctx, e, node)
		return err == nil && strings.Contains(body, "hami_monitor_driver_last_pass_timestamp_seconds "), nil
	})
}
