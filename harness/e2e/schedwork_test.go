//go:build kind

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/gpuwork"
	"github.com/limitbed/limitbed/harness/gpuwork/window"
	"github.com/limitbed/limitbed/harness/kindcluster"
	"github.com/limitbed/limitbed/plugin/launch"
)

// The compute limit's judge on a kind node: fakegpu's record of each container's completed work
// (harness/gpuwork), read on the node by the plugin image's gpuwork; the workload is the plugin
// image's hamicore-launchprobe, run in a pod through a launch method.
const (
	nodeFakeDir     = vgpuDir + "/fakegpu" // the chart's install step puts fakegpu here
	nodeGPUWork     = nodeFakeDir + "/bin/gpuwork"
	nodeLaunchprobe = nodeFakeDir + "/bin/hamicore-launchprobe"
	podLaunchprobe  = toolsDir + "/hamicore-launchprobe"
	nodeStateDir    = "/var/lib/fakegpu" // the chart's fakeDriver.stateDir
	// nodeProfileLink names the node's profile as the pods and the chart's daemons name it
	// (/etc/fakegpu/profile): fakegpu names a GPU's shared state after its profile file's name.
	nodeProfileLink = "/run/limitbed-e2e/profile"
	kernelUS        = 1000 // launchprobe's uniform spin kernel
	// shareTolerance is the compute limit's bound on fakegpu (sharetest.Tolerance): every 10 s
	// window after a container's first 2 s within its limit ± 0.03.
	shareTolerance = 0.03
	// starvedShare: a 1 s window below it after the first 2 s is a container starved.
	starvedShare = 0.05
	workTick     = 20 * time.Millisecond // a stall's resolution
)

// nodeGPUEnv is the environment of the node's fakegpu tools for the GPU whose shared state is in
// state (nodeStateDir: the pods' GPU).
func nodeGPUEnv(state string) []string {
	return []string{"LD_LIBRARY_PATH=" + nodeFakeDir + "/lib", "FAKEGPU_PROFILE=" + nodeProfileLink, "FAKEGPU_STATE_DIR=" + state}
}

// linkNodeProfile makes nodeProfileLink on node name the node's profile (the chart's node.profile).
func linkNodeProfile(t *testing.T, e *testEnv, node string) {
	t.Helper()
	script := fmt.Sprintf("mkdir -p %[1]s && ln -sfn %[2]s/node.profile %[1]s/profile", nodeProfileLink[:strings.LastIndex(nodeProfileLink, "/")], nodeFakeDir)
	if out, err := e.c.NodeExec(t.Context(), node, "sh", "-c", script); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

// measureUnthrottled runs the workload alone, without the library, on a fresh GPU of the node's
// profile (a state of its own: the pods' GPU is not touched) and returns its rate of completed
// work (ns per ns) from its 2nd to its 4th second: the unit a share is a fraction of. Spin kernels
// keep fakegpu's engine busy: it must be 1.
func measureUnthrottled(t *testing.T, e *testEnv, node string) float64 {
	t.Helper()
	linkNodeProfile(t, e, node)
	env := strings.Join(nodeGPUEnv("$d"), " ")
	script := fmt.Sprintf(`d=$(mktemp -d /tmp/limitbed-unthrottled.XXXXXX) && export %s FAKEGPU_CONTAINER=unthrottled
%s --seconds 4.5 --kernel-us %d > /dev/null & p=$!
sleep 2; %s; sleep 2; %s; wait $p; rc=$?; rm -rf "$d"; exit $rc`, env, nodeLaunchprobe, kernelUS, nodeGPUWork, nodeGPUWork)
	out, err := e.c.NodeExec(t.Context(), node, "sh", "-c", script)
	if err != nil {
		t.Fatalf("the workload alone on %s: %v", node, err)
	}
	var snaps []gpuwork.Snapshot
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if s, err := gpuwork.Parse(sc.Bytes()); err == nil {
			snaps = append(snaps, s)
		}
	}
	if len(snaps) != 2 {
		t.Fatalf("the workload alone on %s: %d readings of the records, want 2:\n%s", node, len(snaps), out)
	}
	a, errA := containerWork(snaps[0], "unthrottled")
	b, errB := containerWork(snaps[1], "unthrottled")
	if errA != nil || errB != nil || snaps[1].NowNS <= snaps[0].NowNS {
		t.Fatalf("the workload alone on %s: %v %v", node, errA, errB)
	}
	rate := float64(b-a) / float64(snaps[1].NowNS-snaps[0].NowNS)
	t.Logf("the workload alone, unthrottled, on %s's fakegpu: %.4f of the GPU's time in work", node, rate)
	if rate < 0.98 || rate > 1.02 {
		t.Fatalf("the unthrottled rate of spin kernels is %.4f, want 1 (the engine busy with them)", rate)
	}
	return rate
}

// containerWork is the ns of work the named container completed on every unit of the GPU.
func containerWork(s gpuwork.Snapshot, name string) (uint64, error) {
	var sum uint64
	for u := range s.Units {
		w, err := s.ContainerWork(name, u)
		if err != nil {
			return 0, err
		}
		sum += w.WorkNS
	}
	return sum, nil
}

// workSampler reads the node GPU's completed-work records every workTick (gpuwork --serve on
// the node through docker exec), each reading stamped with this machine's clock too.
type workSampler struct {
	rd    *gpuwork.Reader
	stop  context.CancelFunc // the reading loop
	kill  context.CancelFunc // the docker exec
	done  chan struct{}
	mu    sync.Mutex
	snaps []gpuwork.Snapshot
	walls []time.Time
	err   error
}

func startSampler(t *testing.T, e *testEnv, node string) *workSampler {
	t.Helper()
	linkNodeProfile(t, e, node)
	cmdCtx, kill := context.WithCancel(context.WithoutCancel(t.Context()))
	args := append(append([]string{"exec", "-i", node, "env"}, nodeGPUEnv(nodeStateDir)...), nodeGPUWork, "--serve")
	rd, err := gpuwork.OpenCommand(exec.CommandContext(cmdCtx, "docker", args...))
	if err != nil {
		kill()
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(cmdCtx)
	s := &workSampler{rd: rd, stop: stop, kill: kill, done: make(chan struct{})}
	t.Cleanup(s.close)
	go func() {
		defer close(s.done)
		tk := time.NewTicker(workTick)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				_, _ = s.mark()
			}
		}
	}()
	if _, err := s.mark(); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *workSampler) mark() (gpuwork.Snapshot, error) {
	snap, err := s.rd.Snapshot()
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return snap, err
	}
	s.snaps, s.walls = append(s.snaps, snap), append(s.walls, now)
	return snap, nil
}

// close stops the readings and ends gpuwork on the node (the end of its input).
func (s *workSampler) close() {
	s.stop()
	<-s.done
	_ = s.rd.Close()
	s.kill()
}

// readings are the snapshots so far, in fakegpu's time order, or the first error of a reading.
func (s *workSampler) readings() ([]gpuwork.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]gpuwork.Snapshot(nil), s.snaps...)
	sort.Slice(out, func(a, b int) bool { return out[a].NowNS < out[b].NowNS })
	return out, s.err
}

// clock is fakegpu's clock (ns) at wall time w, by the reading taken nearest it.
func (s *workSampler) clock(w time.Time) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	best := 0
	for i, at := range s.walls {
		if at.Sub(w).Abs() < s.walls[best].Sub(w).Abs() {
			best = i
		}
	}
	return uint64(int64(s.snaps[best].NowNS) + int64(w.Sub(s.walls[best])))
}

// workload is launchprobe running in a pod's container through a launch method, its completed
// work named label in fakegpu's records (FAKEGPU_CONTAINER: the test double's accounting label,
// set on the command line, so that a login session has it too).
type workload struct {
	label, method string
	pc            *kindcluster.PodContainer
	pidFile       string
	done          chan launchOutcome
}

type launchOutcome struct {
	res launch.Result
	err error
}

// startWorkload starts launchprobe for seconds in pc through method.
func startWorkload(t *testing.T, pc *kindcluster.PodContainer, method, label string, seconds int) *workload {
	t.Helper()
	m, err := launch.Lookup(method)
	if err != nil {
		t.Fatal(err)
	}
	w := &workload{label: label, method: method, pc: pc, pidFile: "/tmp/limitbed-" + label + ".pid", done: make(chan launchOutcome, 1)}
	cmd := fmt.Sprintf(`sh -c 'echo $$ > %s; exec env FAKEGPU_CONTAINER=%s %s --seconds %d --kernel-us %d'`,
		w.pidFile, label, podLaunchprobe, seconds, kernelUS)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Duration(seconds)*time.Second+3*time.Minute)
	go func() {
		defer cancel()
		res, err := launch.Run(ctx, pc, m, cmd)
		w.done <- launchOutcome{res, err}
	}()
	return w
}

// wait waits for the workload to end and fails the test unless it exited with want.
func (w *workload) wait(t *testing.T, want int) launch.Result {
	t.Helper()
	o := <-w.done
	if o.err != nil {
		t.Fatalf("%s through %s: %v", w.label, w.method, o.err)
	}
	if o.res.ExitCode != want {
		t.Fatalf("%s through %s exited %d, want %d\nstdout: %s\nstderr: %s\nlauncher: %s %s", w.label, w.method,
			o.res.ExitCode, want, o.res.Stdout, o.res.Stderr, o.res.Launcher.Stdout, o.res.Launcher.Stderr)
	}
	return o.res
}

// stop ends the workload (SIGTERM from root in its container) and waits for it.
func (w *workload) stop(t *testing.T) launch.Result {
	t.Helper()
	res, err := w.pc.Exec(t.Context(), []string{"sh", "-c", "kill $(cat " + w.pidFile + ")"}, sandboxOpts())
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("stop %s: exit %d, %v: %s", w.label, res.ExitCode, err, res.Stderr)
	}
	return w.wait(t, 143)
}

// podShare is one pod's workload judged by the node GPU's completed work: per 1 s window from its
// first launch and per 10 s window after its first 2 s (sliding by 1 s), as shares of the GPU.
type podShare struct {
	label          string
	limit          int
	start, end     uint64 // fakegpu's clock: its first launch, the end judged
	windows, long  []float64
	stall, stallAt time.Duration // its longest stall after 2 s (to the readings' tick), and when
}

// judgeShare reads label's share from the readings, from its first launch up to end (0: the last
// reading), or for length (when set) if that ends sooner.
func judgeShare(snaps []gpuwork.Snapshot, label string, limit int, unthrottled float64, end uint64, length time.Duration) (podShare, error) {
	ps := podShare{label: label, limit: limit, end: end}
	if len(snaps) < 2 {
		return ps, fmt.Errorf("%d readings of the work records", len(snaps))
	}
	for _, p := range snaps[len(snaps)-1].Processes {
		if p.Container == label && p.StartedNS > 0 && (ps.start == 0 || p.StartedNS < ps.start) {
			ps.start = p.StartedNS
		}
	}
	if ps.start == 0 {
		var seen []string
		for _, c := range snaps[len(snaps)-1].Containers {
			seen = append(seen, c.Name)
		}
		return ps, fmt.Errorf("no process of %s launched on the node's GPU (its records name %v)", label, seen)
	}
	series := make([]window.Sample, 0, len(snaps))
	for _, s := range snaps {
		w, err := containerWork(s, label)
		if err != nil {
			return ps, err
		}
		series = append(series, window.Sample{T: s.NowNS, V: w})
	}
	if ps.end == 0 {
		ps.end = snaps[len(snaps)-1].NowNS
	}
	if length > 0 {
		ps.end = min(ps.end, ps.start+uint64(length))
	}
	ps.windows = window.Scale(window.Seconds(series, ps.start, ps.end), unthrottled)
	ps.long = window.Scale(window.Long(series, ps.start, ps.end), unthrottled)
	stall, at := window.LongestStall(series, ps.start+window.SkipSeconds*window.Second, ps.end)
	if stall > 0 {
		ps.stall, ps.stallAt = time.Duration(stall), time.Duration(at-ps.start)
	}
	return ps, nil
}

// String is the pod's figures, as the test logs them.
func (ps podShare) String() string {
	return fmt.Sprintf("%s (%d %%): %.1f s judged\n    10 s windows: %s\n    1 s windows: %s\n    longest stall after 2 s: %v at %.1f s (readings %v apart)",
		ps.label, ps.limit, float64(ps.end-ps.start)/1e9, floats(ps.long), floats(ps.windows),
		ps.stall.Round(time.Millisecond), ps.stallAt.Seconds(), workTick)
}

// second is the 1 s window of ps that holds fakegpu time at (-1 before its start).
func (ps podShare) second(at uint64) int {
	if at < ps.start {
		return -1
	}
	return int((at - ps.start) / window.Second)
}

func floats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.3f", x)
	}
	return strings.Join(s, " ")
}
