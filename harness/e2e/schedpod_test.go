//go:build kind

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limitbed/limitbed/plugin/monitor/metricname"
)

// The chart's scheduler container and its metrics port (deployments/helm/limitbed: scheduler).
const (
	schedulerContainer   = "vgpu-scheduler"
	schedulerMetricsPort = "9395"
)

// chartPod is the chart's running pod on node (not one being deleted).
func chartPod(ctx context.Context, e *testEnv, node string) (corev1.Pod, error) {
	pods, err := e.c.Kube.CoreV1().Pods(e.release.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + node, LabelSelector: "app.kubernetes.io/name=limitbed"})
	if err != nil {
		return corev1.Pod{}, fmt.Errorf("the chart's pods on %s: %w", node, err)
	}
	var running []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running = append(running, p)
		}
	}
	if len(running) != 1 {
		return corev1.Pod{}, fmt.Errorf("%d running chart pods on %s, want 1", len(running), node)
	}
	return running[0], nil
}

// wantScheduled asserts that the scheduler of the chart's pod named pod identifies each of pods
// from the node's records (the API server's pods, the kubelet's pod-resources, the limits files:
// its start says so) with its limit under force, and has given it slices (which still grow, with
// growing: the workloads run).
func wantScheduled(t *testing.T, e *testEnv, pod string, pods []sharePod, growing bool) {
	t.Helper()
	ctx := t.Context()
	log, err := e.c.Kube.CoreV1().Pods(e.release.Namespace).GetLogs(pod, &corev1.PodLogOptions{Container: schedulerContainer}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("log of %s's scheduler: %v", pod, err)
	}
	if !strings.Contains(string(log), `identity="API server, kubelet, limits files"`) {
		t.Errorf("%s's scheduler does not identify containers from the node's records:\n%s", pod, log)
	}
	var keys []string
	for _, p := range pods {
		keys = append(keys, p.key)
		want := regexp.MustCompile(`(?m)"Scheduling container" .*container="` + regexp.QuoteMeta(p.key) + `" gpus=1 limit=` +
			fmt.Sprint(p.limit) + ` policy="force"`)
		if !want.Match(log) {
			t.Errorf("%s's scheduler never scheduled %s (%s, %d %% force):\n%s", pod, p.key, p.pc.Name, p.limit, log)
		}
	}
	first := slicesOf(scrapeScheduler(t, e, pod), keys...)
	t.Logf("%s's scheduler: slices %v of %v", pod, first, keys)
	if !growing {
		for i, n := range first {
			if n <= 0 {
				t.Errorf("%s's scheduler gave %s no slice (%s %v)", pod, keys[i], metricname.SchedulerSlices, n)
			}
		}
		return
	}
	time.Sleep(2 * time.Second)
	then := slicesOf(scrapeScheduler(t, e, pod), keys...)
	for i := range keys {
		if first[i] < 0 || then[i] <= first[i] {
			t.Errorf("%s's scheduler does not drive %s: %s %v, 2 s later %v", pod, keys[i], metricname.SchedulerSlices, first[i], then[i])
		}
	}
}

// scrapeScheduler fetches the scheduler's /metrics of the chart's pod named pod through the API
// server's pod proxy.
func scrapeScheduler(t *testing.T, e *testEnv, pod string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	body, err := e.c.Kube.CoreV1().Pods(e.release.Namespace).ProxyGet("http", pod, schedulerMetricsPort, "/metrics", nil).DoRaw(ctx)
	if err != nil {
		t.Fatalf("scrape the scheduler of %s: %v", pod, err)
	}
	return string(body)
}

// handover is when the chart's pod on a node was replaced, by this machine's clock (the API's
// view, polled 100 ms apart): the old pod's deletion seen (the kubelet stops its containers: the
// scheduler sets every entry Off), the old pod gone, the new pod's scheduler running.
type handover struct {
	deleting, gone, running time.Time
	pod                     string // the new pod
	err                     error
}

// watchHandover watches node's chart pods until old is replaced and the new pod's scheduler runs
// (at most 5 minutes).
func watchHandover(ctx context.Context, e *testEnv, node string, old corev1.Pod) <-chan handover {
	out := make(chan handover, 1)
	go func() {
		var h handover
		pods := e.c.Kube.CoreV1().Pods(e.release.Namespace)
		for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			now := time.Now()
			if h.gone.IsZero() {
				p, err := pods.Get(ctx, old.Name, metav1.GetOptions{})
				switch {
				case apierrors.IsNotFound(err) || (err == nil && p.UID != old.UID):
					h.gone = now
				case err == nil && p.DeletionTimestamp != nil && h.deleting.IsZero():
					h.deleting = now
				}
				if !h.gone.IsZero() && h.deleting.IsZero() {
					h.deleting = now
				}
			}
			l, err := pods.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node, LabelSelector: "app.kubernetes.io/name=limitbed"})
			if err != nil {
				continue
			}
			for _, p := range l.Items {
				if p.UID == old.UID {
					continue
				}
				for _, s := range p.Status.ContainerStatuses {
					if s.Name == schedulerContainer && s.State.Running != nil {
						h.running, h.pod = now, p.Name
						if h.gone.IsZero() {
							h.err = fmt.Errorf("the new pod %s's scheduler ran before the old pod %s was gone (maxSurge 0)", p.Name, old.Name)
						}
						out <- h
						return
					}
				}
			}
		}
		h.err = fmt.Errorf("the chart's pod %s on %s was not replaced within 5 minutes", old.Name, node)
		out <- h
	}()
	return out
}

// slicesOf reads each key's slices counter from the scheduler's metrics (-1: not there).
func slicesOf(body string, keys ...string) []float64 {
	out := make([]float64, len(keys))
	for i, k := range keys {
		out[i] = -1
		re := regexp.MustCompile(`(?m)^` + metricname.SchedulerSlices + `\{container="` + regexp.QuoteMeta(k) + `",gpu="[^"]+"\} (\S+)$`)
		if m := re.FindStringSubmatch(body); m != nil {
			out[i], _ = strconv.ParseFloat(m[1], 64)
		}
	}
	return out
}
