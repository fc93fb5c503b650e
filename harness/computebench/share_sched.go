package computebench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/schedproto"
	"github.com/limitbed/limitbed/plugin/timeslice"
)

// Scheduled runs a SharedRunner's containers as a node with the compute scheduler runs them: as
// Prepare it records each container as the device plugin does (its limits file and its grant
// file naming its GPU), starts the node's scheduler (plugin/timeslice, in this process) for every
// run's containers directory, and starts each process in a private mount namespace where the
// container's directory is /usr/local/vgpu and its grant file is mounted read-only at the path
// compiled into libvgpu.so (hamicore/test/privatens; needs root).
type Scheduled struct {
	Privatens string           // hamicore/test/privatens
	Config    timeslice.Config // zero: timeslice.DefaultConfig()
	Logger    klog.Logger
	// Binary, when set, is vgpu-scheduler: it runs as a process of its own per node (its CPU time
	// is then measured: CPU) instead of in this one, with the node's fakegpu environment, so it
	// reads each GPU's SM clock from fakegpu's NVML (in this process the clock is not read: slices
	// are charged their time).
	Binary string

	mu    sync.Mutex
	nodes map[string]*schedNode // by containers directory
	ctrs  map[string]bool       // containers recorded
	cpu   time.Duration
}

type schedNode struct {
	n      *timeslice.Node // in process
	grants string
	gpuEnv []string  // the node's fakegpu environment (the binary's NVML)
	cmd    *exec.Cmd // or the binary
	hook   string
	cancel context.CancelFunc
	done   chan error
}

// Prepare implements SharedRunner.Prepare.
func (s *Scheduled) Prepare(ctx context.Context, c Container, dir string, cmd *exec.Cmd) error {
	if c.Policy == "none" {
		return nil // no library: nothing obeys a grant
	}
	containers := filepath.Dir(dir)
	grants := filepath.Join(filepath.Dir(containers), "sched")
	key := filepath.Base(dir)
	grant := filepath.Join(grants, key+timeslice.GrantSuffix)
	env := envMap(cmd.Env)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctrs == nil {
		s.ctrs, s.nodes = map[string]bool{}, map[string]*schedNode{}
	}
	if !s.ctrs[grant] {
		if err := s.record(c, containers, grants, key, env); err != nil {
			return err
		}
		s.ctrs[grant] = true
	}
	if s.nodes[containers] == nil {
		s.start(containers, grants, nodeEnv(cmd.Env))
	}
	state := env["FAKEGPU_STATE_DIR"]
	args := []string{"--bind", dir, "--bind", state, "--mount", "/usr/local/vgpu=" + dir,
		"--mount-ro", schedproto.ContainerGrantPath + "=" + grant, "--"}
	cmd.Args = append(append([]string{s.Privatens}, args...), cmd.Args...)
	cmd.Path = s.Privatens
	return nil
}

// record writes what the device plugin writes at Allocate for the container, its GPU named by
// the fakegpu profile.
func (s *Scheduled) record(c Container, containers, grants, key string, env map[string]string) error {
	gpus, err := node.ReadProfile(filepath.Join(env["FAKEGPU_PROFILE_DIR"], env["FAKEGPU_PROFILE"]+".profile"))
	if err != nil {
		return fmt.Errorf("container %s: %w", c.Name, err)
	}
	if c.GPU < 0 || c.GPU >= len(gpus) {
		return fmt.Errorf("container %s: GPU %d, the profile has %d", c.Name, c.GPU, len(gpus))
	}
	return RecordContainer(containers, grants, key, c, gpus[c.GPU].UUID)
}

// RecordContainer writes what the device plugin writes at Allocate for a container with the
// compute scheduler on the node: <containers>/<key>.limits (its compute limit, policy and
// priority; its usage cache at /usr/local/vgpu, the container's directory <containers>/<key>,
// made here) and its grant file <grants>/<key>.grant naming the GPU gpuUUID. A real GPU's
// processes run with them too (scripts/gpu-check.sh, `limitbed bench pod`).
func RecordContainer(containers, grants, key string, c Container, gpuUUID string) error {
	vars := map[string]string{
		"CUDA_DEVICE_SM_LIMIT": strconv.Itoa(c.Limit), "GPU_CORE_UTILIZATION_POLICY": c.Policy,
		"CUDA_TASK_PRIORITY": strconv.Itoa(c.Priority), "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/usage.cache",
	}
	data, err := limitsfile.Render(vars)
	if err != nil {
		return fmt.Errorf("container %s: %w", c.Name, err)
	}
	if err := os.MkdirAll(filepath.Join(containers, key), 0o755); err != nil {
		return fmt.Errorf("container %s: %w", c.Name, err)
	}
	pub := limitsfile.Publisher{}
	if err := pub.Publish(filepath.Join(containers, key+limitsfile.Suffix), data); err != nil {
		return fmt.Errorf("container %s: %w", c.Name, err)
	}
	u, err := schedproto.ParseUUID(gpuUUID)
	if err != nil {
		return fmt.Errorf("container %s: %w", c.Name, err)
	}
	g, err := schedproto.GrantSpec{GPUs: []schedproto.UUID{u}}.Bytes()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(grants, 0o755); err != nil {
		return err
	}
	return pub.Publish(filepath.Join(grants, key+timeslice.GrantSuffix), g)
}

// nodeEnv is what of a container's environment describes its node's fakegpu: its libraries and
// shared state, not the container's own variables.
func nodeEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == "LD_LIBRARY_PATH" || (strings.HasPrefix(k, "FAKEGPU_") && k != "FAKEGPU_CONTAINER") {
			out = append(out, kv)
		}
	}
	return out
}

func (s *Scheduled) start(containers, grants string, gpuEnv []string) {
	cfg := s.Config
	if cfg.Period == 0 {
		cfg = timeslice.DefaultConfig()
	}
	ctx, cancel := context.WithCancel(context.Background())
	sn := &schedNode{grants: grants, gpuEnv: gpuEnv, cancel: cancel, done: make(chan error, 1)}
	s.nodes[containers] = sn
	if s.Binary != "" {
		// The binary finds <hook-path>/vgpu/{containers,sched}: the run's directory, by a link.
		hook, err := os.MkdirTemp("", "limitbed-sched-hook-")
		if err == nil {
			err = os.Symlink(filepath.Dir(containers), filepath.Join(hook, "vgpu"))
		}
		if err != nil {
			sn.done <- fmt.Errorf("scheduler hook path: %w", err)
			return
		}
		sn.hook = hook
		sn.cmd = exec.Command(s.Binary, "--hook-path="+hook, "--metrics-address=", "--period="+cfg.Period.String(),
			"--drain-wait="+cfg.DrainWait.String())
		sn.cmd.Env, sn.cmd.Stderr = append(os.Environ(), gpuEnv...), os.Stderr
		if err := sn.cmd.Start(); err != nil {
			sn.done <- fmt.Errorf("start %s: %w", s.Binary, err)
			return
		}
		go func() {
			<-ctx.Done()
			_ = sn.cmd.Process.Signal(syscall.SIGTERM)
			err := sn.cmd.Wait()
			s.mu.Lock()
			if ps := sn.cmd.ProcessState; ps != nil {
				s.cpu += ps.UserTime() + ps.SystemTime()
			}
			s.mu.Unlock()
			_ = os.RemoveAll(hook)
			sn.done <- err
		}()
		return
	}
	sn.n = &timeslice.Node{GrantDir: grants, ContainersDir: containers, Source: timeslice.LimitsFiles{Dir: containers},
		Config: cfg, Logger: s.Logger}
	go func() { sn.done <- sn.n.Run(ctx) }()
}

// CPU is the CPU time the scheduler binaries used, counted when they stopped (Close, Restart).
func (s *Scheduled) CPU() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cpu
}

// Stats returns every running node's scheduling figures, by containers directory.
func (s *Scheduled) Stats() map[string]map[schedproto.UUID]timeslice.GPUReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]map[schedproto.UUID]timeslice.GPUReport{}
	for dir, sn := range s.nodes {
		if sn.n != nil {
			out[dir] = sn.n.Stats()
		}
	}
	return out
}

// Restart stops every node's scheduler and starts it again after pause (a scheduler restarting
// mid-run, as a DaemonSet's pod does).
func (s *Scheduled) Restart(pause func()) {
	s.mu.Lock()
	nodes := s.nodes
	s.nodes = map[string]*schedNode{}
	s.mu.Unlock()
	for dir, sn := range nodes {
		sn.cancel()
		<-sn.done
		if pause != nil {
			pause()
		}
		s.mu.Lock()
		s.start(dir, sn.grants, sn.gpuEnv)
		s.mu.Unlock()
	}
}

// Close stops the schedulers.
func (s *Scheduled) Close() error {
	s.mu.Lock()
	nodes := s.nodes
	s.nodes = map[string]*schedNode{}
	s.mu.Unlock()
	var err error
	for _, sn := range nodes {
		sn.cancel()
		if e := <-sn.done; e != nil && err == nil {
			err = e
		}
	}
	return err
}

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
