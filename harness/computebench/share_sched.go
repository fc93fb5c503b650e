package computebench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/plugin/allocate"
	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/libvars"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/schedproto"
	"github.com/limitbed/limitbed/plugin/timeslice"
)

// Scheduled runs a SharedRunner's containers as a node with the compute scheduler runs them: as
// Prepare it has the device plugin's Allocate record each container (its directory, its limits
// file and its grant file naming its GPU), starts the node's scheduler (plugin/timeslice, in this
// process) for every run's containers directory, and starts each process in a private mount namespace where the
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
	// Tracer, in process, receives every GPU's slices (timeslice.Node.Tracer): a test that misses
	// its bound can say where the time went.
	Tracer timeslice.Tracer

	mu     sync.Mutex
	nodes  map[string]*schedNode // by containers directory
	ctrs   map[string]bool       // containers recorded, by directory
	mounts map[string][]string   // their privatens mount arguments, by directory
	cpu    time.Duration
}

type schedNode struct {
	n      *timeslice.Node // in process
	hook   string          // the node's hook path
	gpuEnv []string        // the node's fakegpu environment (the binary's NVML)
	cmd    *exec.Cmd       // or the binary
	kill   atomic.Bool     // the binary is stopped with SIGKILL, not SIGTERM (KillRestart)
	cancel context.CancelFunc
	done   chan error
}

// Prepare implements SharedRunner.Prepare. dir is the container's directory in a node's
// containers directory, <hook>/vgpu/containers/<key> (SharedRunner lays its runs out so).
func (s *Scheduled) Prepare(ctx context.Context, c Container, dir string, cmd *exec.Cmd) error {
	if c.Policy == "none" {
		return nil // no library: nothing obeys a grant
	}
	containers := filepath.Dir(dir)
	hook := filepath.Dir(filepath.Dir(containers))
	if paths.ContainersDir(hook) != containers {
		return fmt.Errorf("container %s: %s is not in a node's containers directory (<hook>/vgpu/containers)", c.Name, dir)
	}
	env := envMap(cmd.Env)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctrs == nil {
		s.ctrs, s.nodes, s.mounts = map[string]bool{}, map[string]*schedNode{}, map[string][]string{}
	}
	if !s.ctrs[dir] {
		mounts, err := s.record(c, hook, env)
		if err != nil {
			return err
		}
		s.ctrs[dir], s.mounts[dir] = true, mounts
	}
	if s.nodes[containers] == nil {
		s.start(hook, nodeEnv(cmd.Env))
	}
	state := env["FAKEGPU_STATE_DIR"]
	args := append([]string{"--bind", dir, "--bind", state}, s.mounts[dir]...)
	cmd.Args = append(append(append([]string{s.Privatens}, args...), "--"), cmd.Args...)
	cmd.Path = s.Privatens
	return nil
}

// record has the device plugin's Allocate write the container's files, its GPU named by the
// fakegpu profile, and returns the privatens arguments of the mounts its processes need.
func (s *Scheduled) record(c Container, hook string, env map[string]string) ([]string, error) {
	gpus, err := node.ReadProfile(filepath.Join(env["FAKEGPU_PROFILE_DIR"], env["FAKEGPU_PROFILE"]+".profile"))
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	if c.GPU < 0 || c.GPU >= len(gpus) {
		return nil, fmt.Errorf("container %s: GPU %d, the profile has %d", c.Name, c.GPU, len(gpus))
	}
	_, resp, err := RecordContainer(hook, c, gpus[c.GPU].UUID)
	if err != nil {
		return nil, err
	}
	return SchedMounts(resp)
}

// benchContainer is the name of a bench pod's one container: its key is <name>_main.
const benchContainer = "main"

// ContainerKey is the key the device plugin gives c's container (paths.ContainerKey): the pod's
// UID is the container's name.
func ContainerKey(c Container) (string, error) { return paths.ContainerKey(c.Name, benchContainer) }

// RecordContainer has the device plugin's own Allocate (plugin/allocate, with the compute
// scheduler on the node) write what it writes for the container on a node whose hook path is
// hook: the container's directory <hook>/vgpu/containers/<key>, made afresh, its limits file
// beside it (its compute limit as the placement gives it, its policy and priority as its pod spec
// sets them) and its grant file naming the GPU gpuUUID; so the bench runs what ships. It returns
// the container's key and Allocate's answer (the mounts). A real GPU's processes run with them
// too (scripts/gpu-check.sh, `limitbed bench pod`).
func RecordContainer(hook string, c Container, gpuUUID string) (string, *pluginapi.ContainerAllocateResponse, error) {
	key, err := ContainerKey(c)
	if err != nil {
		return "", nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	// The node's containers directory, as the chart's install step makes it (images/plugin/install.sh).
	if err := os.MkdirAll(paths.ContainersDir(hook), 0o755); err != nil {
		return "", nil, err
	}
	a, err := allocate.New(allocate.Options{HookPath: hook, ComputeScheduler: true})
	if err != nil {
		return "", nil, err
	}
	var spec []corev1.EnvVar
	if c.Policy != "" {
		spec = append(spec, corev1.EnvVar{Name: libvars.CorePolicy, Value: c.Policy})
	}
	spec = append(spec, corev1.EnvVar{Name: libvars.TaskPriority, Value: strconv.Itoa(c.Priority)})
	resp, err := a.Allocate(allocate.Request{
		Pod:       &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: c.Name, UID: types.UID(c.Name)}},
		Container: &corev1.Container{Name: benchContainer, Env: spec},
		// No memory limit (0: none): the bench is of the compute limit.
		Devices:  annotations.ContainerDevices{{UUID: gpuUUID, Type: "NVIDIA", UsedCores: int32(c.Limit)}},
		Delivery: v1.LimitDeliveryFile,
	})
	if err != nil {
		return "", nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	return key, resp, nil
}

// schedMounts are the container paths of Allocate's mounts a bench process gets: its directory
// (the usage region, the report) and its grant file. The library comes preloaded from the build
// and the limits from the environment, as the bench's other runs have them.
var schedMounts = []string{paths.ContainerVGPUDir, schedproto.ContainerGrantPath}

// SchedMounts returns privatens's arguments for the mounts of resp a bench process gets
// (--mount or --mount-ro CONTAINER=HOST), or an error naming the one missing.
func SchedMounts(resp *pluginapi.ContainerAllocateResponse) ([]string, error) {
	var args []string
	for _, want := range schedMounts {
		i := slices.IndexFunc(resp.Mounts, func(m *pluginapi.Mount) bool { return m.ContainerPath == want })
		if i < 0 {
			return nil, fmt.Errorf("allocate response without the mount of %s", want)
		}
		flag := "--mount"
		if resp.Mounts[i].ReadOnly {
			flag = "--mount-ro"
		}
		args = append(args, flag, want+"="+resp.Mounts[i].HostPath)
	}
	return args, nil
}

// MountHost returns the host path of resp's mount at the container path cpath, "" if none.
func MountHost(resp *pluginapi.ContainerAllocateResponse, cpath string) string {
	for _, m := range resp.Mounts {
		if m.ContainerPath == cpath {
			return m.HostPath
		}
	}
	return ""
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

func (s *Scheduled) start(hook string, gpuEnv []string) {
	cfg := s.Config
	if cfg.Period == 0 {
		cfg = timeslice.DefaultConfig()
	}
	ctx, cancel := context.WithCancel(context.Background())
	containers := paths.ContainersDir(hook)
	sn := &schedNode{hook: hook, gpuEnv: gpuEnv, cancel: cancel, done: make(chan error, 1)}
	s.nodes[containers] = sn
	if s.Binary != "" {
		sn.cmd = s.binaryCmd(hook, gpuEnv, cfg)
		sn.cmd.Stderr = os.Stderr
		if err := sn.cmd.Start(); err != nil {
			sn.done <- fmt.Errorf("start %s: %w", s.Binary, err)
			return
		}
		go func() {
			<-ctx.Done()
			sig := syscall.SIGTERM
			if sn.kill.Load() {
				sig = syscall.SIGKILL
			}
			_ = sn.cmd.Process.Signal(sig)
			err := sn.cmd.Wait()
			s.mu.Lock()
			if ps := sn.cmd.ProcessState; ps != nil {
				s.cpu += ps.UserTime() + ps.SystemTime()
			}
			s.mu.Unlock()
			sn.done <- err
		}()
		return
	}
	sn.n = &timeslice.Node{GrantDir: schedproto.GrantDir(hook), ContainersDir: containers,
		Source: timeslice.LimitsFiles{Dir: containers}, Config: cfg, Logger: s.Logger, Tracer: s.Tracer}
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
func (s *Scheduled) Restart(pause func()) { s.restart(false, pause) }

// KillRestart SIGKILLs every node's scheduler binary (nothing set Off: its grants stay as they
// were, the beat stops) and starts a new one after pause.
func (s *Scheduled) KillRestart(pause func()) { s.restart(true, pause) }

func (s *Scheduled) restart(kill bool, pause func()) {
	s.mu.Lock()
	nodes := s.nodes
	s.nodes = map[string]*schedNode{}
	s.mu.Unlock()
	for _, sn := range nodes {
		sn.kill.Store(kill)
		sn.cancel()
		<-sn.done
		if pause != nil {
			pause()
		}
		s.mu.Lock()
		s.start(sn.hook, sn.gpuEnv)
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
