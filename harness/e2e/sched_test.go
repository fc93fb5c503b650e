//go:build kind

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/kindcluster"
	"github.com/limitbed/limitbed/plugin/libvars"
	"github.com/limitbed/limitbed/plugin/paths"
)

// The node's compute scheduler on a real kubelet (docs/plugin.md, "vgpu-scheduler"): the chart
// runs vgpu-scheduler beside the plugin on every GPU node; it identifies each container from the
// API server's pods, the kubelet's pod-resources and the limits files, and drives the grant file
// the plugin mounts into the container. Two pods share the file worker's fake GPU under force, at
// 30 % (its workload started over ssh: a fresh environment, the limit from /overrideEnv alone) and
// at 50 % (kubectl exec), each running hamicore-launchprobe's spin kernels (1 ms), judged by
// fakegpu's record of each one's completed work read on the node.

// sharePod is a pod of the scheduler's scenarios.
type sharePod struct {
	pc     *kindcluster.PodContainer
	limit  int
	key    string // its container's key on the node, <pod UID>_main: the scheduler's name for it
	label  string // its workload's name in fakegpu's records
	method string // the launch method its workload is started through
}

// sharePods creates the two pods on the file worker's GPU (the harness places them as HAMi's
// scheduler would, with the placement's cores) and checks that each got its limits file.
func sharePods(t *testing.T, e *testEnv) []sharePod {
	t.Helper()
	node := e.c.Worker(fileWorker)
	var out []sharePod
	for _, p := range []struct {
		limit  int
		method string
	}{{30, "ssh"}, {50, "exec"}} {
		name := fmt.Sprintf("%s-%d", podName(t), p.limit)
		pc := gpuPodReq(t, e, gpuReq{worker: fileWorker, uuid: e.gpuUUID, name: name, memMiB: 2000, cores: int32(p.limit),
			env: map[string]string{libvars.CorePolicy: "force"}})
		key, err := paths.ContainerKey(podUID(t, e, pc), pc.Container)
		if err != nil {
			t.Fatal(err)
		}
		limits := nodeLimitsFile(t, e, node, pc)
		for _, want := range []string{fmt.Sprintf("%s=%d\n", libvars.SMLimit, p.limit), libvars.CorePolicy + "=force\n"} {
			if !strings.Contains(limits, want) {
				t.Fatalf("limits file of %s = %q, want %q", name, limits, want)
			}
		}
		out = append(out, sharePod{pc: pc, limit: p.limit, key: key, label: name, method: p.method})
	}
	return out
}

// TestKindSchedulerShares: 30 % and 50 % on one GPU through the real kubelet and the chart's
// scheduler hold their shares, every 10 s window after each pod's first 2 s within its limit ±
// 0.03 of the GPU (the unthrottled rate of the same workload on the node's fakegpu is measured:
// 1), and the scheduler names both containers, identified from the node's records.
func TestKindSchedulerShares(t *testing.T) {
	e := need(t)
	node := e.c.Worker(fileWorker)
	unthrottled := measureUnthrottled(t, e, node)
	pods := sharePods(t, e)
	smp := startSampler(t, e, node)
	const seconds = 24
	var ws []*workload
	for _, p := range pods {
		ws = append(ws, startWorkload(t, p.pc, p.method, p.label, seconds))
	}
	for i, w := range ws {
		res := w.wait(t, 0)
		if _, ok := res.Env[libvars.SMLimit]; ok && pods[i].method == "ssh" {
			t.Errorf("the ssh session has %s: it does not exercise the limits file", libvars.SMLimit)
		}
	}
	snaps, err := smp.readings()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		// It launches for `seconds` from its start, and its first launch is a little later.
		ps, err := judgeShare(snaps, p.label, p.limit, unthrottled, 0, (seconds-1)*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s through %s: %s", p.pc.Name, p.method, ps)
		lo, hi := float64(p.limit)/100-shareTolerance, float64(p.limit)/100+shareTolerance
		if len(ps.long) == 0 {
			t.Errorf("%s: no 10 s window", p.label)
		}
		for i, w := range ps.long {
			if w < lo || w > hi {
				t.Errorf("%s: the 10 s window from %d s did %.3f of the GPU, want %.2f..%.2f", p.label, i+2, w, lo, hi)
			}
		}
	}
	pod, err := chartPod(t.Context(), e, node)
	if err != nil {
		t.Fatal(err)
	}
	wantScheduled(t, e, pod.Name, pods, false)
}

// TestKindSchedulerRollout: with the two pods of TestKindSchedulerShares running, `helm upgrade`
// with a changed pod annotation rolls the chart's DaemonSet (maxSurge 0, maxUnavailable 1: on
// each node the old pod goes, its scheduler setting every entry Off, then the new one starts).
// Across the rollout no pod is over its limit + 0.03 in any 10 s window, none does less than 0.05
// of the GPU in a 1 s window after its first 2 s, and the new pod's scheduler drives both
// containers afterwards.
func TestKindSchedulerRollout(t *testing.T) {
	e := need(t)
	ctx := t.Context()
	node := e.c.Worker(fileWorker)
	unthrottled := measureUnthrottled(t, e, node)
	pods := sharePods(t, e)
	old, err := chartPod(ctx, e, node)
	if err != nil {
		t.Fatal(err)
	}
	smp := startSampler(t, e, node)
	var ws []*workload
	for _, p := range pods {
		ws = append(ws, startWorkload(t, p.pc, p.method, p.label, 600))
	}
	time.Sleep(12 * time.Second) // a 10 s window after the first 2 s before the rollout
	handed := watchHandover(ctx, e, node, old)
	since := time.Now()
	values := chartValues("file", true)
	values["podAnnotations"] = map[string]any{"limitbed.io/e2e-rollout": since.UTC().Format(time.RFC3339Nano)}
	if err := e.c.HelmUpgrade(ctx, e.release, values, 4*time.Minute); err != nil {
		t.Fatal(err)
	}
	rolled := time.Since(since)
	h := <-handed
	if h.err != nil {
		t.Fatal(h.err)
	}
	for _, w := range []int{fileWorker, envWorker, migWorker} {
		if err := waitPluginRegistered(ctx, e, e.c.Worker(w), since); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("helm upgrade: %.1f s; on %s the old pod %s was deleted %.1f s in, gone at %.1f s, the new pod %s's scheduler ran at %.1f s",
		rolled.Seconds(), node, old.Name, h.deleting.Sub(since).Seconds(), h.gone.Sub(since).Seconds(), h.pod, h.running.Sub(since).Seconds())
	// A 10 s window wholly after the new scheduler took over (its scan, its calibration).
	time.Sleep(time.Until(h.running.Add(15 * time.Second)))
	wantScheduled(t, e, h.pod, pods, true)
	end, err := smp.mark()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		w.stop(t)
	}
	snaps, err := smp.readings()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		ps, err := judgeShare(snaps, p.label, p.limit, unthrottled, end.NowNS, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s through %s: %s\n    the old scheduler's pod deleted in second %d, the new one's scheduler running in second %d",
			p.pc.Name, p.method, ps, ps.second(smp.clock(h.deleting)), ps.second(smp.clock(h.running)))
		hi := float64(p.limit)/100 + shareTolerance
		for i, w := range ps.long {
			if w > hi {
				t.Errorf("%s: the 10 s window from %d s did %.3f of the GPU, over its %d %% (+%.2f)", p.label, i+2, w, p.limit, shareTolerance)
			}
		}
		for i, w := range ps.windows {
			if i >= 2 && w < starvedShare {
				t.Errorf("%s: second %d did %.3f of the GPU: starved", p.label, i, w)
			}
		}
		if evs := podEvents(t, e, p.pc); len(evs) > 0 {
			t.Logf("%s: the monitor's events: %+v", p.pc.Name, evs)
		}
	}
}
