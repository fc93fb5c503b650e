package monitor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/internal/cbuild"
)

// container is one workload of the process-level policy test: a
// launchprobe of its own pod, all of them on one fake GPU.
type container struct {
	name   string
	env    []string // CUDA_DEVICE_SM_LIMIT, GPU_CORE_UTILIZATION_POLICY, CUDA_TASK_PRIORITY
	lo, hi float64  // its busy fraction after the first 2 s
	late   bool     // starts a second after the others: its neighbours are already busy
}

type probeOut struct {
	BusyFraction float64   `json:"busy_fraction"`
	Windows      []float64 `json:"windows"`
}

func (p probeOut) steady() float64 {
	if len(p.Windows) < 3 {
		return -1
	}
	s := 0.0
	for _, w := range p.Windows[2:] {
		s += w
	}
	return s / float64(len(p.Windows)-2)
}

// runNode starts every container's probe against one fake GPU, with the
// monitor's feedback loop deciding the `default` policy, and returns the
// probes' results by name.
func runNode(t *testing.T, seconds int, cs []container) map[string]probeOut {
	t.Helper()
	p := cbuild.Build(t)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "containers")
	ctx, cancel := context.WithCancel(context.Background())
	f := &Feedback{Dir: dir, Hold: time.Second, Logger: klog.Background()}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); f.Run(ctx, 200*time.Millisecond) }()
	defer func() { cancel(); wg.Wait() }()
	outs := make([]bytes.Buffer, len(cs))
	errs := make([]bytes.Buffer, len(cs))
	cmds := make([]*exec.Cmd, len(cs))
	order := make([]int, 0, len(cs))
	for i, c := range cs {
		if !c.late {
			order = append(order, i)
		}
	}
	for i, c := range cs {
		if c.late {
			order = append(order, i)
		}
	}
	for n, i := range order {
		c := cs[i]
		if c.late && (n == 0 || !cs[order[n-1]].late) {
			time.Sleep(time.Second)
		}
		pod := filepath.Join(dir, fmt.Sprintf("pod%d_main", i))
		if err := os.MkdirAll(pod, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(filepath.Join(p.Bin, "hamicore-launchprobe"), "--seconds", fmt.Sprint(seconds), "--kernel-us", "1000")
		cmd.Env = append([]string{
			"LD_PRELOAD=" + filepath.Join(p.Lib, "libvgpu.so"),
			"LD_LIBRARY_PATH=" + p.Lib,
			"CUDA_DEVICE_MEMORY_SHARED_CACHE=" + filepath.Join(pod, UsageCacheName),
			"FAKEGPU_PROFILE=a16-16q",
			"FAKEGPU_PROFILE_DIR=" + filepath.Join(p.Root, "fakegpu", "profiles"),
			"FAKEGPU_STATE_DIR=" + filepath.Join(tmp, "gpu"),
		}, c.env...)
		if v := os.Getenv("ASAN_OPTIONS"); v != "" {
			cmd.Env = append(cmd.Env, "ASAN_OPTIONS="+v)
		}
		cmd.Stdout, cmd.Stderr = &outs[i], &errs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	res := map[string]probeOut{}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", cs[i].name, err, outs[i].String(), errs[i].String())
		}
		var o probeOut
		if err := json.Unmarshal(outs[i].Bytes(), &o); err != nil {
			t.Fatalf("%s: %q: %v", cs[i].name, outs[i].String(), err)
		}
		res[cs[i].name] = o
	}
	return res
}

// The `default` policy end to end: libvgpu marks launches in each region,
// the feedback loop decides from every region of the node, libvgpu follows
// the switch. A neighbour at force 20 % leaves ~80 % to a container that is
// not throttled, so each case can fail both ways.
func TestDefaultPolicyOnANode(t *testing.T) {
	const lim = "CUDA_DEVICE_SM_LIMIT=30"
	def, force := "GPU_CORE_UTILIZATION_POLICY=default", "GPU_CORE_UTILIZATION_POLICY=force"
	neighbour := func(prio int) container {
		return container{"neighbour", []string{"CUDA_DEVICE_SM_LIMIT=20", force, fmt.Sprintf("CUDA_TASK_PRIORITY=%d", prio)}, 0.12, 0.28, false}
	}
	cases := []struct {
		name string
		cs   []container
	}{
		{"alone: not throttled", []container{{"a", []string{lim, def}, 0.95, 1.1, false}}},
		// Started next to a busy neighbour. (A container that is already running unthrottled
		// when a neighbour appears has up to ~1 s of work queued; it then launches almost nothing
		// until that has run, so its share holds over time but not in the next seconds.)
		{"busy neighbour of equal priority: throttled", []container{
			{"a", []string{lim, def, "CUDA_TASK_PRIORITY=1"}, 0.22, 0.38, true}, neighbour(1)}},
		{"busy neighbour of higher priority: throttled", []container{
			{"a", []string{lim, def, "CUDA_TASK_PRIORITY=2"}, 0.22, 0.38, true}, neighbour(1)}},
		// The unthrottled container keeps fakegpu's one FIFO timeline full, so the neighbour's
		// kernels run ~1 s after their launch and its own 20 % is not judged here.
		{"busy neighbour of lower priority: not throttled", []container{
			{"a", []string{lim, def, "CUDA_TASK_PRIORITY=1"}, 0.65, 1.0, true},
			{"neighbour", []string{"CUDA_DEVICE_SM_LIMIT=20", force, "CUDA_TASK_PRIORITY=2"}, 0, 0.35, false}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			res := runNode(t, 6, c.cs)
			for _, ct := range c.cs {
				got := res[ct.name].steady()
				if got < ct.lo || got > ct.hi {
					t.Errorf("%s: busy %.3f after the first 2 s (windows %v), want %.2f..%.2f", ct.name, got, res[ct.name].Windows, ct.lo, ct.hi)
				}
			}
		})
	}
}
