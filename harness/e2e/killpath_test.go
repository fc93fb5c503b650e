//go:build kind

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limitbed/limitbed/harness/hold"
	"github.com/limitbed/limitbed/harness/kindcluster"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
)

// spawnat is fakegpu's spawnat on the node (the plugin image installs fakegpu's tools there).
const spawnat = vgpuDir + "/fakegpu/bin/spawnat"

// The monitor's kill path on a real kubelet and container runtime (docs/attacks.md), with the
// file worker's enforcement set to kill: it acts on the process the driver listed, and on no
// other.
//   - A bypass whose main thread exits once it holds its memory (its other thread holds on) is
//     killed within two periods like any bypass (on cgroup v1 without the unified hierarchy, the
//     exited main thread's cgroup file names the root: the monitor used to take it for the node's).
//   - PID reuse: a bypass is killed; the monitor's fakegpu list keeps its record for 4 s (the
//     chart's fakeDriver.nvmlStaleMs, as a real driver's record outlives its process) and a new
//     process of the neighbour pod takes its PID (spawnat on the node, in the neighbour container's
//     cgroups and PID namespace). The neighbour's process keeps running, the neighbour is judged
//     within its limit and gets no Event; the monitor used to SIGKILL that process.
func TestKindKillPath(t *testing.T) {
	e := need(t)
	node := e.c.Worker(fileWorker)
	tenant := gpuPodNamed(t, e, fileWorker, e.gpuUUID, podName(t)+"-tenant", 3000, nil)
	neighbour := gpuPodNamed(t, e, fileWorker, e.gpuUUID, podName(t)+"-neighbour", 2000, nil)
	tenantUID, neighbourUID := podUID(t, e, tenant), podUID(t, e, neighbour)
	honest := startHold(t, tenant, "honest", 1000, "symbols")
	other := startHold(t, neighbour, "neighbour", 1000, "symbols")
	setNodeEnforcement(t, e, node, v1.EnforcementKill)
	waitJudged(t, e, node, tenantUID, false)
	waitJudged(t, e, node, neighbourUID, false)
	const preload = "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libcuda.so.1"
	stillRunning := func(t *testing.T) {
		t.Helper()
		for _, h := range []*hold.Holder{honest, other} {
			if running, err := h.Running(t.Context()); err != nil || !running {
				t.Fatalf("%s was killed (running %v, %v)", h.Name, running, err)
			}
		}
	}

	t.Run("main thread exited", func(t *testing.T) {
		b := holdSpec(t, tenant, hold.Spec{Name: "leaderless", MiB: 4096, API: "symbols", Env: []string{preload},
			Args: []string{"--leader-exits"}})
		wantKilledWithin(t, b, 2*accountingPeriod)
		stillRunning(t)
		waitJudged(t, e, node, tenantUID, false)
	})

	t.Run("PID reuse", func(t *testing.T) {
		b := startHold(t, tenant, "reused", 4096, "symbols", preload)
		wantKilledWithin(t, b, 2*accountingPeriod)
		pid := killedPID(t, e, tenant, b)
		innocent := takePID(t, e, node, neighbour, pid)
		time.Sleep(3 * accountingPeriod) // the record is listed 4 s after the kill
		if !nodeProcessAlive(t, e, node, innocent) {
			t.Fatalf("the neighbour's process %d, which took the killed bypass's PID, was killed", innocent)
		}
		stillRunning(t)
		waitJudged(t, e, node, neighbourUID, false)
		if evs := podEvents(t, e, neighbour); len(evs) != 0 {
			t.Errorf("events on the neighbour: %+v", evs)
		}
		if body := scrapeMonitor(t, e, node); !regexp.MustCompile(`(?m)^hami_monitor_driver_pid_changed_total\{at="attribution"\} [1-9]`).MatchString(body) {
			t.Errorf("the changed record was not counted:\n%s", body)
		}
	})
}

// wantKilledWithin waits for the holder to end by SIGKILL, within bound of its allocation.
func wantKilledWithin(t *testing.T, b *hold.Holder, bound time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rc, err := b.Ended(ctx)
	if err != nil || rc != "137" {
		t.Fatalf("%s ended with %q (%v), want 137 (SIGKILL)", b.Name, rc, err)
	}
	if took := endedAt(t, b).Sub(grantedAt(t, b)); took > bound {
		t.Errorf("%s killed %v after its allocation, want within %v", b.Name, took, bound)
	}
}

// killedPID is the node's PID of the holder b of pc, from the monitor's Event on its kill.
func killedPID(t *testing.T, e *testEnv, pc *kindcluster.PodContainer, b *hold.Holder) int {
	t.Helper()
	var report struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(b.Report, &report); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`process ([0-9]+) \(` + strconv.Itoa(report.PID) + ` in its container\)`)
	deadline := time.Now().Add(30 * time.Second) // the monitor records Events asynchronously
	for time.Now().Before(deadline) {
		for _, ev := range podEvents(t, e, pc) {
			if m := re.FindStringSubmatch(ev.Message); ev.Reason == reasonOverLimitKilled && m != nil {
				pid, _ := strconv.Atoi(m[1])
				return pid
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no %s event names the process that calls itself %d", reasonOverLimitKilled, report.PID)
	return 0
}

// takePID starts `sleep` as process pid of the node, in pc's container's cgroups and PID namespace
// (spawnat, detached on the node), and returns pid; it is killed when the test ends.
func takePID(t *testing.T, e *testEnv, node string, pc *kindcluster.PodContainer, pid int) int {
	t.Helper()
	p, err := e.c.Kube.CoreV1().Pods(pc.Namespace).Get(t.Context(), pc.Name, metav1.GetOptions{})
	if err != nil || len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s: %v", pc.Name, err)
	}
	_, cid, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	out, err := e.c.NodeExec(t.Context(), node, "crictl", "inspect", "--output", "go-template", "--template", "{{.info.pid}}", cid)
	if err != nil {
		t.Fatal(err)
	}
	initPID := strings.TrimSpace(string(out))
	log := fmt.Sprintf("/tmp/limitbed-spawnat-%d", pid)
	script := fmt.Sprintf("setsid %s --cgroups-of %s --pidns-of %s --nspid %d %d sleep 3600 > %s 2>&1 < /dev/null &",
		spawnat, initPID, initPID, 20000+rand.IntN(10000), pid, log)
	if out, err := e.c.NodeExec(t.Context(), node, "sh", "-c", script); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = e.c.NodeExec(context.Background(), node, "kill", "-9", strconv.Itoa(pid)) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := e.c.NodeExec(t.Context(), node, "cat", log)
		if strings.TrimSpace(string(out)) == strconv.Itoa(pid) {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("spawnat on %s: %q", node, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nodeProcessAlive reports whether process pid of the node runs (and is no zombie).
func nodeProcessAlive(t *testing.T, e *testEnv, node string, pid int) bool {
	t.Helper()
	out, err := e.c.NodeExec(t.Context(), node, "sh", "-c", fmt.Sprintf("grep '^State:' /proc/%d/status", pid))
	return err == nil && !strings.Contains(string(out), "zombie")
}
