package monitor

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/region"
)

// container is one workload of the process-level policy test: a
// launchprobe of its own pod, all of them on one fake GPU.
type container struct {
	name   string
	env    []string // CUDA_DEVICE_SM_LIMIT, GPU_CORE_UTILIZATION_POLICY, CUDA_TASK_PRIORITY
	lo, hi float64  // its busy fraction after the first 2 s
	late   bool     // starts a second after the others: its neighbours are already busy
	gpu    int      // which GPU of the node it holds (0 or 1)
	forge  bool     // as root in its container: keeps its region's GPUs zeroed and its priority at -5
}

// nodeGPUs are the UUIDs of 2x-a16-16q, the node's GPUs.
var nodeGPUs = []string{"GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50", "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f51"}

// priorityOf is the container's CUDA_TASK_PRIORITY as its limits file would hold it (default 1).
func priorityOf(c container) int32 {
	p := int32(1)
	for _, e := range c.env {
		if v, ok := strings.CutPrefix(e, "CUDA_TASK_PRIORITY="); ok {
			n, _ := strconv.Atoi(v)
			p = int32(n)
		}
	}
	return p
}

// forgeRegion rewrites what a tenant controls in its region until ctx ends: the GPUs its
// processes launched on (zeroed: "unknown, may share any") and its priority (raised to -5). The
// library stamps a zeroed UUID again on its next launch, so the tenant keeps at it.
func forgeRegion(ctx context.Context, path string) {
	for ctx.Err() == nil {
		if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			_, _ = f.WriteAt(make([]byte, 16*region.UUIDBytes), region.LimitbedOffDevUUID)
			prio := -5
			_, _ = f.WriteAt(binary.NativeEndian.AppendUint32(nil, uint32(prio)), region.LimitbedOffPriority)
			f.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	// The node's identity of each container: its GPU and its priority, as the limits file and
	// the kubelet give them.
	var ids staticIdentity
	for i, c := range cs {
		ids.cs = append(ids.cs, known(fmt.Sprintf("pod%d", i), priorityOf(c), nodeGPUs[c.gpu]))
	}
	f := &Feedback{Dir: dir, Identity: ids, Hold: time.Second, Logger: klog.Background()}
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
			"CUDA_DEVICE_MEMORY_SHARED_CACHE=" + filepath.Join(pod, paths.UsageCacheName),
			"FAKEGPU_PROFILE=2x-a16-16q",
			fmt.Sprintf("CUDA_VISIBLE_DEVICES=%d", c.gpu),
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
		if c.forge {
			wg.Add(1)
			go func() { defer wg.Done(); forgeRegion(ctx, filepath.Join(pod, paths.UsageCacheName)) }()
		}
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
		return container{"neighbour", []string{"CUDA_DEVICE_SM_LIMIT=20", force, fmt.Sprintf("CUDA_TASK_PRIORITY=%d", prio)}, 0.12, 0.28, false, 0, false}
	}
	cases := []struct {
		name string
		cs   []container
	}{
		{"alone: not throttled", []container{{"a", []string{lim, def}, 0.95, 1.1, false, 0, false}}},
		// Started next to a busy neighbour. (A container that is already running unthrottled
		// when a neighbour appears has up to ~1 s of work queued; it then launches almost nothing
		// until that has run, so its share holds over time but not in the next seconds.)
		{"busy neighbour of equal priority: throttled", []container{
			{"a", []string{lim, def, "CUDA_TASK_PRIORITY=1"}, 0.22, 0.38, true, 0, false}, neighbour(1)}},
		{"busy neighbour of higher priority: throttled", []container{
			{"a", []string{lim, def, "CUDA_TASK_PRIORITY=2"}, 0.22, 0.38, true, 0, false}, neighbour(1)}},
		// The unthrottled container keeps fakegpu's one FIFO timeline full, so the neighbour's
		// kernels run ~1 s after their launch and its own 20 % is not judged here.
		{"busy neighbour of lower priority: not throttled", []container{
			{"a", []string{lim, def, "CUDA_TASK_PRIORITY=1"}, 0.65, 1.0, true, 0, false},
			{"neighbour", []string{"CUDA_DEVICE_SM_LIMIT=20", force, "CUDA_TASK_PRIORITY=2"}, 0, 0.35, false, 0, false}}},
		// Issue 20's first finding: a tenant on the other GPU zeroes its region's GPUs ("may share
		// any") and raises its priority there. Taken from the region, that throttled a `default`
		// pod alone on its GPU to its 30 %; the node's own records put the tenant elsewhere.
		{"a tenant on another GPU forging its region: not throttled", []container{
			{"a", []string{lim, def, "CUDA_TASK_PRIORITY=1"}, 0.95, 1.1, true, 1, false},
			{"tenant", []string{"CUDA_DEVICE_SM_LIMIT=20", force, "CUDA_TASK_PRIORITY=1"}, 0.12, 0.28, false, 0, true}}},
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
