package monitor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/internal/proctest"
	"github.com/limitbed/limitbed/internal/tier"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/identity"
)

// realNode is two containers as real cgroups, the monitor reading the real /proc and killing
// through the real PidfdKiller.
type realNode struct {
	p                   cbuild.Paths
	tenant, neighbour   *proctest.Cgroup
	tenantC, neighbourC *identity.Container
	driver              *fakeDriver
	a                   *Accounting
}

func newRealNode(t *testing.T) *realNode {
	tier.Require(t, tier.Root.For("cgroups it moves its processes into, and a PID it gives a process (clone3 set_tid)"))
	n := &realNode{p: cbuild.Build(t), tenant: proctest.NewCgroup(t), neighbour: proctest.NewCgroup(t), driver: &fakeDriver{}}
	n.tenantC = gpuContainer(uidT, n.tenant.ID, 3000, gpuA)
	n.neighbourC = gpuContainer(uidN, n.neighbour.ID, 2000, gpuA)
	n.a = &Accounting{Driver: n.driver, Identity: staticIdentity{cs: []*identity.Container{n.tenantC, n.neighbourC}}, Dir: t.TempDir(),
		ProcRoot: "/proc", ContextAllowance: 1024 * mib, Enforcement: v1.EnforcementKill, Logger: klog.Background()}
	return n
}

// start runs a command in cgroup cg; it returns the command (waited for by the test's cleanup).
func (n *realNode) start(t *testing.T, cg *proctest.Cgroup, name string, args ...string) *exec.Cmd {
	t.Helper()
	c := exec.Command(name, args...)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	cg.Join(t, c.Process.Pid)
	return c
}

// probe starts cudaprobe (fakegpu, no libvgpu.so) holding what args say in cgroup cg, and returns
// once it reported its allocation granted.
func (n *realNode) probe(t *testing.T, cg *proctest.Cgroup, args ...string) *exec.Cmd {
	t.Helper()
	c := exec.Command(filepath.Join(n.p.Bin, "cudaprobe"), append(args, "--hold-until-signal")...)
	c.Env = append(c.Environ(), "LD_LIBRARY_PATH="+n.p.Lib)
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	cg.Join(t, c.Process.Pid) // before its report: before a main thread that exits has exited
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.Contains(line, `"granted_mib":`) ||
		strings.Contains(line, `"granted_mib":0`) {
		t.Fatalf("cudaprobe %v: %q %v", args, line, err)
	}
	return c
}

// spawnAt starts `sleep 600` as process pid in cgroup cg (fakegpu's spawnat), and returns the
// spawnat command (it waits for its child and exits with its status).
func (n *realNode) spawnAt(t *testing.T, cg *proctest.Cgroup, pid int) *exec.Cmd {
	t.Helper()
	c := exec.Command(filepath.Join(n.p.Bin, "spawnat"), "--cgroup", cg.Path, strconv.Itoa(pid), "sleep", "600")
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL); _ = c.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != strconv.Itoa(pid) {
		t.Fatalf("spawnat %d: %q %v %s", pid, line, err, stderr.String())
	}
	return c
}

func (n *realNode) pass(t *testing.T) *Report {
	t.Helper()
	rep, err := n.a.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// waitKilled waits for c to end by SIGKILL.
func waitKilled(t *testing.T, c *exec.Cmd) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("%s ended with %v, want SIGKILL", c.Path, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was not killed", c.Path)
	}
}

// wantAlive fails unless process pid still runs a while after the pass.
func wantAlive(t *testing.T, pid int, what string) {
	t.Helper()
	time.Sleep(200 * time.Millisecond)
	if !proctest.Alive(pid) {
		t.Fatalf("%s (PID %d) was killed", what, pid)
	}
}

// The kill path with real processes in real cgroups: the offender is SIGKILLed through its pidfd,
// and a process of the neighbour's container that takes its PID (spawnat: clone3 with set_tid,
// the PID reuse made certain) is never signalled, whether it takes it between two periods while
// the driver still lists the offender's memory, or while the list is being read. A process whose
// main thread has exited (on this machine's cgroup version) is found and killed. Before: the
// neighbour's process was killed in both reuse cases, and on cgroup v1 the process without its
// main thread was read as a host process and never killed.
func TestKillPathRealProcesses(t *testing.T) {
	t.Run("a neighbour's process takes the PID between two periods", func(t *testing.T) {
		n := newRealNode(t)
		offender := n.start(t, n.tenant, "sleep", "600")
		pid := offender.Process.Pid
		n.driver.set(map[string][]gpu.Process{gpuA: {{PID: pid, UsedBytes: 5000 * mib}}})
		if rep := n.pass(t); len(rep.Killed) != 1 || rep.Killed[0].PID != pid {
			t.Fatalf("the offender was not killed: %+v", rep.Usage)
		}
		waitKilled(t, offender)
		n.spawnAt(t, n.neighbour, pid) // the driver still lists pid with the offender's 5000 MiB
		rep := n.pass(t)
		wantAlive(t, pid, "the neighbour's process")
		if u := usageOf(rep, uidN); u != nil || len(rep.Changed) != 1 || len(rep.Killed) != 0 {
			t.Fatalf("the neighbour %+v, changed %+v, killed %+v", u, rep.Changed, rep.Killed)
		}
		if got := n.a.changedCounts(); got[ChangedAtAttribution] != 1 {
			t.Errorf("counted %v", got)
		}
	})
	t.Run("a neighbour's process takes the PID while the list is read", func(t *testing.T) {
		n := newRealNode(t)
		offender := n.start(t, n.tenant, "sleep", "600")
		pid := offender.Process.Pid
		n.driver.set(map[string][]gpu.Process{gpuA: {{PID: pid, UsedBytes: 5000 * mib}}})
		n.driver.onList = func(call int) []gpu.DeviceProcesses {
			if call > 0 {
				return deviceLists(nil) // the offender's record is gone with it
			}
			_ = offender.Process.Kill() // the offender ends once listed, and its PID is taken
			waitKilled(t, offender)
			n.spawnAt(t, n.neighbour, pid)
			return nil
		}
		rep := n.pass(t)
		wantAlive(t, pid, "the neighbour's process")
		if len(rep.Killed) != 0 || len(rep.Changed) != 1 {
			t.Fatalf("killed %+v, changed %+v", rep.Killed, rep.Changed)
		}
	})
	t.Run("on fakegpu, whose list keeps the offender after its end", func(t *testing.T) {
		n := newRealNode(t)
		n.a.Driver = fakeDriverLister(t, "FAKEGPU_NVML_STALE_MS=5000")
		n.tenantC.GPUs = []identity.GPU{{UUID: a16UUID}}
		n.neighbourC.GPUs = []identity.GPU{{UUID: a16UUID}}
		offender := n.probe(t, n.tenant, "--mib", "4096")
		pid := offender.Process.Pid
		if rep := n.pass(t); len(rep.Killed) != 1 || rep.Killed[0].PID != pid {
			t.Fatalf("the offender was not killed: %+v", rep.Usage)
		}
		waitKilled(t, offender)
		n.spawnAt(t, n.neighbour, pid)
		for i := 0; i < 3; i++ { // fakegpu lists pid with the offender's 4396 MiB for 5 s
			rep := n.pass(t)
			if len(rep.Changed) != 1 || rep.Changed[0].PID != pid || len(rep.Killed) != 0 {
				t.Fatalf("pass %d: changed %+v, killed %+v", i, rep.Changed, rep.Killed)
			}
			wantAlive(t, pid, "the neighbour's process")
		}
	})
	t.Run("the main thread has exited", func(t *testing.T) {
		n := newRealNode(t)
		lister := fakeDriverLister(t)
		n.tenantC.GPUs = []identity.GPU{{UUID: a16UUID}}
		n.a.Driver = lister
		c := n.probe(t, n.tenant, "--mib", "4096", "--leader-exits")
		proctest.WaitState(t, c.Process.Pid, 'Z')
		rep := n.pass(t)
		if u := usageOf(rep, uidT); u == nil || !u.Over || len(rep.Killed) != 1 {
			t.Fatalf("cgroup v1 %v: the tenant %+v, unattributed %+v, killed %+v", n.tenant.V1, u, rep.Unattributed, rep.Killed)
		}
		waitKilled(t, c)
	})
}

// Where the kernel has no pidfd_open the process's /proc directory is the descriptor, and where it
// cannot signal through a descriptor at all nothing is signalled (a plain kill could reach a
// process that took the PID after the check).
func TestPidfdKillerOlderKernels(t *testing.T) {
	n := newRealNode(t)
	for _, c := range []struct {
		name   string
		k      PidfdKiller
		killed bool
	}{
		{"no pidfd_open: the /proc directory", PidfdKiller{pidfdOpen: func(int, int) (int, error) { return -1, syscall.ENOSYS }}, true},
		{"no pidfd_send_signal: nothing", PidfdKiller{sendSignal: func(int, syscall.Signal) error { return syscall.ENOSYS }}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := n.start(t, n.tenant, "sleep", "600")
			st, err := identity.ReadStartTime("/proc", p.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			err = c.k.Kill(ProcessUsage{PID: p.Process.Pid, StartTime: st}, n.tenantC)
			if c.killed {
				if err != nil {
					t.Fatal(err)
				}
				waitKilled(t, p)
				return
			}
			if !errors.Is(err, errNoPidfd) {
				t.Fatalf("Kill: %v, want %v", err, errNoPidfd)
			}
			wantAlive(t, p.Process.Pid, fmt.Sprintf("the process (%s)", c.name))
		})
	}
}
