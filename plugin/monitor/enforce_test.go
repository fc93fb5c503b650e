package monitor

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/identity"
)

// PidfdKiller signals only the process that was judged: a PID whose start
// time or container changed since (it ended and the PID was reused) is
// refused, and so is a process in no container.
func TestPidfdKiller(t *testing.T) {
	start := func() (*exec.Cmd, uint64) {
		c := exec.Command("sleep", "60")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		p, err := identity.ReadProcess("/proc", c.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		return c, p.StartTime
	}
	c := gpuContainer(uidT, cidT, 3000, gpuA)
	root := t.TempDir()

	victim, st := start()
	fakeProc(t, root, victim.Process.Pid, 1, st+1, cidT) // reused: another start time
	err := PidfdKiller{ProcRoot: root}.Kill(ProcessUsage{PID: victim.Process.Pid, StartTime: st}, c)
	if !errors.Is(err, errChanged) {
		t.Errorf("a reused PID: %v", err)
	}
	fakeProc(t, root, victim.Process.Pid, 1, st, "") // a host process
	if err := (PidfdKiller{ProcRoot: root}).Kill(ProcessUsage{PID: victim.Process.Pid, StartTime: st}, c); !errors.Is(err, errChanged) {
		t.Errorf("a host process: %v", err)
	}
	if err := victim.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("a refused kill signalled the process: %v", err)
	}

	fakeProc(t, root, victim.Process.Pid, 1, st, cidT) // still the judged process, in the container
	if err := (PidfdKiller{ProcRoot: root}).Kill(ProcessUsage{PID: victim.Process.Pid, StartTime: st}, c); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- victim.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("the process ended with %v, want SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the judged process was not killed")
	}
	_ = os.RemoveAll(filepath.Join(root, strconv.Itoa(victim.Process.Pid)))
}

// The driver collector exports the last pass: per container and GPU the
// driver's bytes, the bound, the verdict and the process count; per process
// its container and whether the region lists it; unattributed memory per GPU.
func TestDriverCollector(t *testing.T) {
	f := newAccounting(t, v1.EnforcementKill)
	f.driver.set(map[string][]gpu.Process{gpuA: {honest, bypass, neighbour, host}})
	f.pass(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(&DriverCollector{Accounting: f.a})
	want := `
# HELP hami_container_driver_memory_over_limit 1 when a container holds more on a GPU than its limit plus its processes' context allowance, by the driver's count (absent when it has no limit there).
# TYPE hami_container_driver_memory_over_limit gauge
hami_container_driver_memory_over_limit{container="main",device_index="0",gpu_uuid="` + gpuA + `",pod_uid="` + uidN + `"} 0
hami_container_driver_memory_over_limit{container="main",device_index="0",gpu_uuid="` + gpuA + `",pod_uid="` + uidT + `"} 1
# HELP hami_container_driver_memory_bytes GPU memory a container's processes hold on a GPU by the driver's count (nvmlDeviceGetComputeRunningProcesses), whatever they loaded; device_index is the GPU's index in the container, -1 for a GPU it was not given.
# TYPE hami_container_driver_memory_bytes gauge
hami_container_driver_memory_bytes{container="main",device_index="0",gpu_uuid="` + gpuA + `",pod_uid="` + uidN + `"} 1.3631488e+09
hami_container_driver_memory_bytes{container="main",device_index="0",gpu_uuid="` + gpuA + `",pod_uid="` + uidT + `"} 5.972688896e+09
# HELP hami_node_driver_unattributed_memory_bytes GPU memory of processes that belong to no known container (the host, a pod the API server has not reported), or whose PID names another process than the one the driver's record was first seen with: reported, never killed.
# TYPE hami_node_driver_unattributed_memory_bytes gauge
hami_node_driver_unattributed_memory_bytes{gpu_uuid="` + gpuA + `"} 5.24288e+08
# HELP hami_monitor_driver_kills_total Processes the monitor killed (enforcement: kill) for putting their container over its GPU memory limit.
# TYPE hami_monitor_driver_kills_total counter
hami_monitor_driver_kills_total{container="main",pod_uid="` + uidT + `"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "hami_container_driver_memory_over_limit", "hami_container_driver_memory_bytes",
		"hami_node_driver_unattributed_memory_bytes", "hami_monitor_driver_kills_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(&DriverCollector{Accounting: f.a}, "hami_driver_process_memory_bytes"); n != 4 {
		t.Errorf("%d per-process series, want 4", n)
	}
}
