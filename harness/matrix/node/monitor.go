package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limitbed/limitbed/plugin/allocate"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/monitor"
	"github.com/limitbed/limitbed/plugin/monitor/metricname"
)

// MonitorConfig is how the node runs the vgpu-monitor.
type MonitorConfig struct {
	Binary      string // the vgpu-monitor (BuildBinary)
	Enforcement v1.Enforcement
	// Period is the driver-truth accounting period (and the compute policy's); 0: the binary's.
	Period time.Duration
	// ContextAllowance is --context-allowance ("" leaves the binary's default).
	ContextAllowance string
	// Env is added to its environment (K=V: fakegpu's variables, FAKEGPU_NVML_STALE_MS).
	Env []string
}

// Monitor is a vgpu-monitor running on the node as its DaemonSet would: a host process with the
// node's HOOK_PATH, the fake kubelet's pod-resources socket, the node's API server through a
// kubeconfig, and fakegpu's NVML reading the node's device state.
type Monitor struct {
	MetricsURL string
	Period     time.Duration // its accounting period
	cmd        *exec.Cmd
	done       chan struct{}
	log        *lockedBuffer
}

// StartMonitor starts the monitor and waits until /metrics answers with a completed driver-truth
// pass (its start-up is not counted in what a scenario times). The node must serve its API over
// HTTP (Config.HTTPAPI).
func (n *Node) StartMonitor(ctx context.Context, mc MonitorConfig) (*Monitor, error) {
	dir := n.agentDir("monitor")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("node: monitor: %w", err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := n.WriteKubeconfig(kubeconfig); err != nil {
		return nil, fmt.Errorf("node: monitor: %w", err)
	}
	devCfg := filepath.Join(dir, "device-config.yaml")
	cfg := fmt.Sprintf("version: v1\nnvidia:\n  resourceCountName: %s\n  enforcement: %s\n", ResourceName, mc.Enforcement)
	if err := os.WriteFile(devCfg, []byte(cfg), 0o644); err != nil {
		return nil, fmt.Errorf("node: monitor: %w", err)
	}
	// fakegpu names its shared state after the profile file's base name: the monitor's copy is
	// called "profile", as the containers' /etc/fakegpu/profile, so both read one device state.
	prof, err := os.ReadFile(n.cfg.GPUProfile)
	if err != nil {
		return nil, fmt.Errorf("node: monitor: %w", err)
	}
	profile := filepath.Join(dir, filepath.Base(allocate.ContainerFakeProfile))
	if err := os.WriteFile(profile, prof, 0o644); err != nil {
		return nil, fmt.Errorf("node: monitor: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("node: monitor: %w", err)
	}
	args := []string{"--node-name=" + Name, "--kubeconfig=" + kubeconfig, "--hook-path=" + n.HookPath,
		"--pod-resources-socket=" + n.PodResourcesSocket(), "--device-config-file=" + devCfg,
		"--node-config-file=" + filepath.Join(dir, "config.json"), "--metrics-address=127.0.0.1:" + port,
		"--nvml-library=" + filepath.Join(n.cfg.Artifacts.Lib, "libnvidia-ml.so.1"), "--sweep-interval=1h", "--v=2"}
	if mc.Period > 0 {
		args = append(args, "--accounting-interval="+mc.Period.String(), "--feedback-interval="+mc.Period.String())
	}
	if mc.ContextAllowance != "" {
		args = append(args, "--context-allowance="+mc.ContextAllowance)
	}
	cmd := exec.Command(mc.Binary, args...)
	cmd.Env = append(append(os.Environ(), "FAKEGPU_PROFILE="+profile, "FAKEGPU_STATE_DIR="+n.StateDir), mc.Env...)
	period := mc.Period
	if period == 0 {
		period = monitor.DefaultAccountingInterval
	}
	m := &Monitor{MetricsURL: "http://127.0.0.1:" + port + "/metrics", Period: period, cmd: cmd, done: make(chan struct{}), log: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = m.log, m.log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("node: start %s: %w", mc.Binary, err)
	}
	go func() { _ = cmd.Wait(); close(m.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		body, err := m.Metrics(ctx)
		if err == nil && strings.Contains(body, metricname.DriverLastPass+" ") {
			return m, nil
		}
		if err == nil {
			err = errors.New("no driver-truth pass completed yet")
		}
		if time.Now().After(deadline) {
			m.Stop()
			return nil, fmt.Errorf("node: monitor: /metrics does not answer: %w\n%s", err, m.LogTail())
		}
		select {
		case <-m.done:
			return nil, fmt.Errorf("node: monitor exited at start\n%s", m.LogTail())
		case <-ctx.Done():
			m.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Metrics fetches /metrics.
func (m *Monitor) Metrics(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.MetricsURL, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", m.MetricsURL, resp.Status)
	}
	return string(b), nil
}

// Stop ends the monitor (SIGTERM, then SIGKILL after 10 s).
func (m *Monitor) Stop() {
	_ = m.cmd.Process.Signal(os.Interrupt)
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

// LogTail is the end of the monitor's log.
func (m *Monitor) LogTail() string {
	b := m.log.Bytes()
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return "", errors.New("no TCP address")
	}
	return strconv.Itoa(addr.Port), nil
}

// lockedBuffer is a bytes.Buffer safe for the process's writes and the harness's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.b.Bytes()...)
}
