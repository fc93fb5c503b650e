package computebench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/harness/gpuwork"
	"github.com/limitbed/limitbed/plugin/libvars"
	"github.com/limitbed/limitbed/plugin/monitor"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/schedproto"
)

// SharedRunner runs scenarios of several containers on the GPUs of one fakegpu profile and
// judges each container by fakegpu's record of its completed work (harness/gpuwork).
type SharedRunner struct {
	Probe      string // hamicore-launchprobe
	Preload    string // libvgpu.so
	Work       string // fakegpu's gpuwork
	Lib        string // fakegpu's libraries (LD_LIBRARY_PATH)
	ProfileDir string
	Dir        string   // scratch: one GPU state and one node's containers directory per run
	Env        []string // more environment for every process (ASAN_OPTIONS …)
	Logger     klog.Logger
	// Tick is how often the work records are read (default 100 ms); a window's boundary is the
	// reading nearest it, and its share is exact over the time between its two readings.
	Tick time.Duration
	// BaselineSeconds is how long each workload runs alone, unthrottled, to measure the rate a
	// share is a fraction of (default 6: its windows after the first 2 s).
	BaselineSeconds float64
	// Prepare, when set, is called for every process before it starts, with its container's
	// directory (its usage.cache is there): a scheduler's test can add what a container gets.
	Prepare func(ctx context.Context, c Container, dir string, cmd *exec.Cmd) error

	mu        sync.Mutex
	n         int
	baselines map[string]float64 // by profile and container signature
}

// Result is a scenario's outcome: each container's shares and each GPU's busy fraction.
type Result struct {
	Scenario   string            `json:"scenario"`
	Profile    string            `json:"profile"`
	Seconds    float64           `json:"seconds"`
	Tolerance  float64           `json:"tolerance"`
	Containers []ContainerResult `json:"containers"`
	GPUs       []GPUResult       `json:"gpus"`
}

// ContainerResult is one container's completed work: its share = work done per second over the
// rate its workload does alone, unthrottled, per 1 s window from its start and per 10 s window
// after its first 2 s (sliding by 1 s). A window without two readings is -1.
type ContainerResult struct {
	Container
	Unthrottled float64   `json:"unthrottled"` // ns of work per ns, alone and unlimited
	Windows     []float64 `json:"windows"`
	Long        []float64 `json:"long"`
	Kernels     uint64    `json:"kernels"` // completed up to the scenario's end
	WorkNS      uint64    `json:"work_ns"`
	// LongestStall is the longest time after its first 2 s between two readings of the records
	// that found its work where it was (it did none meanwhile): its longest stall, less at most
	// two ticks of the reading; LongestStallAt is when it began, from the container's start.
	LongestStall   time.Duration `json:"longest_stall_ns"`
	LongestStallAt time.Duration `json:"longest_stall_at_ns"`
	Judged         bool          `json:"judged"`
	Lo             float64       `json:"lo,omitempty"`
	Hi             float64       `json:"hi,omitempty"`
	OK             bool          `json:"ok"`
}

// GPUResult is one GPU's engine: busy fraction per 1 s window of the scenario.
type GPUResult struct {
	GPU  int       `json:"gpu"`
	Busy []float64 `json:"busy"`
}

// OK reports whether every judged container held its band.
func (r *Result) OK() bool {
	for _, c := range r.Containers {
		if c.Judged && !c.OK {
			return false
		}
	}
	return true
}

func (r *SharedRunner) gpuEnv(profile, state string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "LD_LIBRARY_PATH=" + r.Lib, "FAKEGPU_PROFILE=" + profile,
		"FAKEGPU_PROFILE_DIR=" + r.ProfileDir, "FAKEGPU_STATE_DIR=" + state}, r.Env...)
}

func (c Container) probeArgs(seconds float64) []string {
	args := []string{"--seconds", strconv.FormatFloat(seconds, 'f', 3, 64), "--workload", c.Workload}
	switch c.Workload {
	case "uniform":
		args = append(args, "--kernel-us", strconv.Itoa(c.KernelUS))
	case "burst":
		args = append(args, "--kernel-us", strconv.Itoa(c.KernelUS), "--burst", strconv.Itoa(c.Burst))
	}
	return args
}

// proc is one started process of a container.
type proc struct {
	c        Container
	dies     bool        // killed by its own --die-after: its end is the point
	stopped  atomic.Bool // a held container's process stopped at the scenario's end
	cmd      *exec.Cmd
	out, err bytes.Buffer
}

// start starts the container's processes: the library preloaded with the container's region and
// limits (none for policy none), its name for fakegpu's records, its GPU.
func (r *SharedRunner) start(ctx context.Context, c Container, gpu []string, node string, seconds float64) ([]*proc, error) {
	key, err := ContainerKey(c)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	dir := paths.ContainerDir(node, key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	if err := plantReport(dir, c.Report); err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	env := append(append([]string{}, gpu...), "FAKEGPU_CONTAINER="+c.Name, "CUDA_VISIBLE_DEVICES="+strconv.Itoa(c.GPU))
	if c.Policy != "none" {
		env = append(env, "LD_PRELOAD="+r.Preload, libvars.SharedCache+"="+filepath.Join(dir, paths.UsageCacheName),
			libvars.SMLimit+"="+strconv.Itoa(c.Limit), libvars.CorePolicy+"="+c.Policy,
			libvars.TaskPriority+"="+strconv.Itoa(c.Priority))
	}
	env = append(env, c.Env...)
	var ps []*proc
	for i := 0; i < c.Procs; i++ {
		args := c.probeArgs(seconds)
		if i == 0 && c.Die > 0 {
			args = append(args, "--die-after", strconv.FormatFloat(c.Die.Seconds(), 'f', 3, 64))
		}
		p := &proc{c: c, cmd: exec.CommandContext(ctx, r.Probe, args...), dies: i == 0 && c.Die > 0}
		p.cmd.Env, p.cmd.Stdout, p.cmd.Stderr = env, &p.out, &p.err
		if r.Prepare != nil {
			if err := r.Prepare(ctx, c, dir, p.cmd); err != nil {
				return ps, fmt.Errorf("container %s: prepare: %w", c.Name, err)
			}
		}
		// Its own process group: stopping it (a held container's) stops what its wrapper started.
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := p.cmd.Start(); err != nil {
			return ps, fmt.Errorf("container %s: %w", c.Name, err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// plantReport puts what a hostile container would in its scheduler report's place (in its own
// cache directory, before its processes start).
func plantReport(dir, plant string) error {
	path := filepath.Join(dir, schedproto.ReportName)
	switch plant {
	case "":
		return nil
	case "symlink":
		return os.Symlink("/dev/null", path)
	case "dir":
		return os.Mkdir(path, 0o755)
	case "short":
		return os.WriteFile(path, []byte("not a report"), 0o666)
	}
	return fmt.Errorf("report=%s: want one of %v", plant, ReportPlants)
}

func (p *proc) wait() error {
	err := p.cmd.Wait()
	if p.stopped.Load() {
		return nil
	}
	if p.dies {
		// SIGKILLed, or its wrapper (privatens) reporting a child SIGKILLed: 128 + 9.
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			if ws := ee.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() == syscall.SIGKILL || ws.ExitStatus() == 128+int(syscall.SIGKILL) {
				return nil
			}
		}
		return fmt.Errorf("container %s: a process meant to die (--die-after) ended otherwise: %v\nstderr: %s", p.c.Name, err, p.err.String())
	}
	if err == nil {
		_, err = ParseProbe(p.out.Bytes())
	}
	if err != nil {
		return fmt.Errorf("container %s: launchprobe %v: %w\nstderr: %s", p.c.Name, p.cmd.Args[1:], err, p.err.String())
	}
	return nil
}

// sampler reads the work records every tick until stopped, and on demand (mark).
type sampler struct {
	rd    *gpuwork.Reader
	mu    sync.Mutex
	snaps []gpuwork.Snapshot
	err   error
}

func (s *sampler) mark() (gpuwork.Snapshot, error) {
	snap, err := s.rd.Snapshot()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = errors.Join(s.err, err)
		return snap, err
	}
	s.snaps = append(s.snaps, snap)
	return snap, nil
}

func (s *sampler) run(ctx context.Context, tick time.Duration) {
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			_, _ = s.mark()
		}
	}
}

// StallGrace is how long past a scenario's end its processes may take to finish (a launchprobe
// synchronises its queue, at most a second of work) before they are taken for stalled.
const StallGrace = 20 * time.Second

// Run runs the scenario: its containers start at their offsets on one fresh fakegpu host (the
// node monitor's policy pass running when a container uses `default`), and end together.
func (r *SharedRunner) Run(ctx context.Context, sc Scenario, tol float64) (*Result, error) {
	if sc.Profile == "" {
		sc.Profile = "a16-16q"
	}
	tick := r.Tick
	if tick <= 0 {
		tick = 100 * time.Millisecond
	}
	r.mu.Lock()
	r.n++
	run := filepath.Join(r.Dir, fmt.Sprintf("shared%d", r.n))
	r.mu.Unlock()
	gpu := r.gpuEnv(sc.Profile, filepath.Join(run, "gpu"))
	node := paths.ContainersDir(run) // run is the node's hook path
	if err := os.MkdirAll(node, 0o755); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	first, err := gpuwork.Once(ctx, r.Work, gpu)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	if err := sc.Check(ngpus(first)); err != nil {
		return nil, err
	}
	unthrottled, err := r.baselinesFor(ctx, sc)
	if err != nil {
		return nil, err
	}
	rd, err := gpuwork.Open(ctx, r.Work, gpu)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	defer rd.Close()
	smp := &sampler{rd: rd}
	sctx, stopSampler := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopSampler(); wg.Wait() }()
	if usesDefault(sc) {
		ids, err := scenarioIdentity(sc, gpu)
		if err != nil {
			return nil, err
		}
		f := &monitor.Feedback{Dir: node, Identity: ids, Hold: 2 * monitor.DefaultFeedbackInterval, Logger: r.Logger}
		wg.Add(1)
		go func() { defer wg.Done(); f.Run(sctx, monitor.DefaultFeedbackInterval) }()
	}
	t0snap, err := smp.mark()
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	t0 := time.Now()
	wg.Add(1)
	go func() { defer wg.Done(); smp.run(sctx, tick) }()
	starts, errs := r.runProcs(ctx, sc, smp, t0, t0snap.NowNS, gpu, node)
	_, _ = smp.mark()
	stopSampler()
	wg.Wait()
	if err := errors.Join(append(errs, smp.err)...); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	return judgeShared(sc, tol, smp.snaps, t0snap.NowNS, starts, unthrottled)
}

// runProcs starts the scenario's containers and waits for their processes. A process still
// running StallGrace after the scenario's end is stalled (a launch waiting for a slice that never
// comes): killed, and the scenario fails saying so, instead of hanging; a held container's
// (Container.Held) are stopped 2 s after the end.
func (r *SharedRunner) runProcs(ctx context.Context, sc Scenario, smp *sampler, t0 time.Time, t0ns uint64, gpu []string, node string) ([]uint64, []error) {
	end := time.Duration(sc.Seconds * float64(time.Second))
	pctx, cancelProcs := context.WithTimeout(ctx, end+StallGrace)
	defer cancelProcs()
	starts, procs, startErr := r.startAll(pctx, sc, smp, t0, t0ns, gpu, node)
	errs := []error{startErr}
	stopHeld := time.AfterFunc(time.Until(t0.Add(end+2*time.Second)), func() {
		for _, p := range procs {
			if p.c.Held {
				p.stopped.Store(true)
				_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			}
		}
	})
	defer stopHeld.Stop()
	for _, p := range procs {
		if startErr != nil {
			_ = p.cmd.Process.Kill()
		}
		errs = append(errs, p.wait())
	}
	if errors.Is(pctx.Err(), context.DeadlineExceeded) {
		errs = append(errs, fmt.Errorf("a process was still running %v after the scenario's end: stalled, killed", StallGrace))
	}
	return starts, errs
}

// startAll starts the scenario's containers at their offsets from t0 (t0ns on fakegpu's clock),
// marking the work records before each; their windows' starts, the processes started, and the
// error that stopped the starting.
func (r *SharedRunner) startAll(ctx context.Context, sc Scenario, smp *sampler, t0 time.Time, t0ns uint64, gpu []string, node string) ([]uint64, []*proc, error) {
	starts := make([]uint64, len(sc.Containers))
	var procs []*proc
	for _, i := range sc.sortedByStart() {
		c := sc.Containers[i]
		if d := time.Until(t0.Add(c.Start)); d > 0 {
			time.Sleep(d)
		}
		if _, err := smp.mark(); err != nil {
			return starts, procs, err
		}
		// Its windows are whole seconds of the scenario from its offset; the process starts a few
		// ms later, which only the first (unjudged) window sees.
		starts[i] = t0ns + uint64(c.Start)
		secs := sc.Seconds - c.Start.Seconds()
		if c.Stop > 0 {
			secs = (c.Stop - c.Start).Seconds()
		}
		ps, err := r.start(ctx, c, gpu, node, secs)
		procs = append(procs, ps...)
		if err != nil {
			return starts, procs, err
		}
	}
	return starts, procs, nil
}

func usesDefault(sc Scenario) bool {
	for _, c := range sc.Containers {
		if c.Policy == "default" {
			return true
		}
	}
	return false
}

func ngpus(s gpuwork.Snapshot) int {
	n := 0
	for _, u := range s.Units {
		if u.MIG < 0 {
			n++
		}
	}
	return n
}

// unitOf is the accounting unit of NVML GPU index gpu.
func unitOf(s gpuwork.Snapshot, gpu int) (int, error) {
	for _, u := range s.Units {
		if u.GPU == gpu && u.MIG < 0 {
			return u.Unit, nil
		}
	}
	return 0, fmt.Errorf("no GPU %d in the profile", gpu)
}
