package fakegpu_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitbed/limitbed/fakegpu/fakegputest"
	"github.com/limitbed/limitbed/internal/tier"
)

// TestProcessListByTheReadersPID: a process in its own PID namespace (as in a
// container, or in a kind node) calls itself 1; the NVML process list read
// from the host's namespace names it by the PID the host sees, as a real
// driver's list does, so a node agent can map and signal it. Before fakegpu
// translated PIDs, the list said 1.
func TestProcessListByTheReadersPID(t *testing.T) {
	tier.Require(t, tier.Root.For("unshare --pid (a PID namespace, as a container's)"))
	h := fakegputest.NewHost(t, "a16-16q")
	c := exec.Command("unshare", "--pid", "--fork", "--kill-child", filepath.Join(h.Paths.Bin, "cudaprobe"), "--mib", "100", "--hold-until-signal")
	c.Env = h.Env
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("holder: %v\nstderr: %s", err, stderr.String())
	}
	p := fakegputest.Decode[fakegputest.Probe](t, line)
	if p.GrantedMiB != 100 || p.PID != 1 {
		t.Fatalf("the holder in its namespace: %+v; want 100 MiB granted to PID 1", p)
	}
	host := childOf(t, c.Process.Pid)
	var listed []int
	for _, proc := range h.Info().Devices[0].Processes {
		listed = append(listed, proc.PID)
		if proc.PID == host && proc.Used >= 100 {
			return
		}
	}
	t.Errorf("the host's NVML process list holds PIDs %v; want the holder's host PID %d (it calls itself %d)", listed, host, p.PID)
}

// childOf returns the only child of pid (unshare's forked child).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
		if err == nil {
			if f := strings.Fields(string(b)); len(f) == 1 {
				n, err := strconv.Atoi(f[0])
				if err == nil {
					return n
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no child of %d: %v %q", pid, err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProcessUtilisationByTheReadersPID: the per-process utilisation samples name a busy process
// in its own PID namespace by the PID the reader sees, as the process list does, so a node agent
// can hold each container's work to its share (the monitor's compute check). Before, the samples
// said 1 (the PID the process calls itself), which on the host names another process.
func TestProcessUtilisationByTheReadersPID(t *testing.T) {
	tier.Require(t, tier.Root.For("unshare --pid (a PID namespace, as a container's)"))
	h := fakegputest.NewHost(t, "a16-16q")
	c := exec.Command("unshare", "--pid", "--fork", "--kill-child", filepath.Join(h.Paths.Bin, "hamicore-launchprobe"),
		"--seconds", "4", "--kernel-us", "1000")
	c.Env = h.Env
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	host := childOf(t, c.Process.Pid)
	time.Sleep(1500 * time.Millisecond)
	var seen []string
	for _, proc := range h.Info().Devices[0].Processes {
		if proc.SMUtil != nil {
			seen = append(seen, strconv.Itoa(proc.PID)+":"+strconv.Itoa(*proc.SMUtil))
			if proc.PID == host && *proc.SMUtil >= 80 {
				return
			}
		}
	}
	t.Errorf("the host's samples (pid:sm_util) %v; want the launcher's host PID %d at 80 %% or more\nstderr: %s", seen, host, stderr.String())
}
