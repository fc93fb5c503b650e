package script

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/identity"
)

// The node monitor's PID-reuse case in containers (docs/attacks.md): a process of one container
// ends and a new process of another container takes its host PID. The host's side plays it with
// fakegpu's spawnat (clone3 with set_tid, as root): the new process is born in the other
// container's cgroups and PID namespace with the PID chosen.

// taker is a process started by reusepid.
type taker struct {
	cmd  *exec.Cmd
	pid  int // its host PID
	done chan struct{}
}

const reuseUsage = "reusepid HOLDER CONTAINER --as=NAME | alive NAME [--for=DURATION] | ! alive NAME"

// cmdReusePID starts `sleep` in CONTAINER as the process with the host PID that the holder HOLDER
// had, named NAME. The monitor killed the holder (`! held` waited for it), and its Event names the
// host PID.
func cmdReusePID(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: %s", reuseUsage)
	}
	st := getState(ts)
	fs := flag.NewFlagSet("reusepid", flag.ContinueOnError)
	as := fs.String("as", "", "")
	parseFlags(ts, reuseUsage, fs, args[2:], 0)
	k, ok := st.killable[args[0]]
	if !ok || *as == "" || st.takers[*as] != nil || st.node == nil {
		ts.Fatalf("reusepid: holder %s known %v, name %q (a holder, a new name, a node)\nusage: %s", args[0], ok, *as, reuseUsage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pid, err := st.killedPID(ctx, k)
	ts.Check(err)
	c := st.ctr(ts, args[1])
	procs, err := containerProcs(sandbox.RuntimeID(c))
	ts.Check(err)
	initPID := 0
	for _, p := range procs {
		if p.NSPID == 1 {
			initPID = p.PID
		}
	}
	if initPID == 0 {
		ts.Fatalf("reusepid: container %s's first process is not on this host's /proc", args[1])
	}
	var last error
	for try := 0; try < 5; try++ {
		tk, err := st.spawnAt(initPID, 20000+rand.IntN(10000), pid)
		if err == nil {
			st.takers[*as] = tk
			ts.Logf("process %d of container %s took the PID of holder %s", pid, args[1], args[0])
			return
		}
		last = err
	}
	ts.Fatalf("reusepid: %v", last)
}

// spawnAt runs spawnat: `sleep 3600` as host PID pid, nspid in the PID namespace of initPID,
// in its cgroups.
func (st *state) spawnAt(initPID, nspid, pid int) (*taker, error) {
	args := []string{"--cgroups-of", strconv.Itoa(initPID), "--pidns-of", strconv.Itoa(initPID), "--nspid", strconv.Itoa(nspid),
		strconv.Itoa(pid), "sleep", "3600"}
	cmd := exec.Command(filepath.Join(st.artifacts.Bin, "spawnat"), args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	tk := &taker{cmd: cmd, pid: pid, done: make(chan struct{})}
	line, rerr := bufio.NewReader(out).ReadString('\n')
	go func() { _ = cmd.Wait(); close(tk.done) }()
	if rerr != nil || strings.TrimSpace(line) != strconv.Itoa(pid) {
		<-tk.done
		return nil, fmt.Errorf("spawnat %v: %q %v: %s", args, line, rerr, stderr.String())
	}
	return tk, nil
}

// cmdAlive asserts the process NAME of reusepid still runs, and with --for=DURATION that it keeps
// running that long; negated, that it ended.
func cmdAlive(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 0 {
		ts.Fatalf("usage: %s", reuseUsage)
	}
	fs := flag.NewFlagSet("alive", flag.ContinueOnError)
	during := fs.Duration("for", 0, "")
	parseFlags(ts, reuseUsage, fs, args[1:], 0)
	tk := getState(ts).takers[args[0]]
	if tk == nil {
		ts.Fatalf("alive: no process %s (reusepid first)", args[0])
	}
	select {
	case <-tk.done:
		if !neg {
			ts.Fatalf("process %s (host PID %d) ended: %v", args[0], tk.pid, tk.cmd.ProcessState)
		}
	case <-time.After(*during):
		if neg {
			ts.Fatalf("process %s (host PID %d) still runs", args[0], tk.pid)
		}
	}
}

func (tk *taker) stop() {
	_ = syscall.Kill(tk.pid, syscall.SIGKILL)
	select {
	case <-tk.done:
	case <-time.After(10 * time.Second):
	}
}

// killable is a holder as the monitor's kill Event names it: its pod and the PID it calls itself.
type killable struct {
	pod   string
	nspid int
}

// killedPID is the host PID of the holder the monitor killed, from its GPUMemoryOverLimitKilled
// Event on the holder's pod ("process <host PID> (<PID> in its container)"), waiting up to 10 s
// for it (Events are recorded asynchronously).
func (st *state) killedPID(ctx context.Context, k killable) (int, error) {
	re := regexp.MustCompile(`^killed \(SIGKILL\): process ([0-9]+) \(` + strconv.Itoa(k.nspid) + ` in its container\)`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs, err := st.node.Kube().CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		for _, e := range evs.Items {
			if m := re.FindStringSubmatch(e.Message); m != nil && e.InvolvedObject.Name == k.pod {
				return strconv.Atoi(m[1])
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no Event of the monitor on pod %s names the process that called itself %d killed", k.pod, k.nspid)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// containerProcs lists the host's processes of the container with runtime ID rid
// ("docker://<id>"), read as the node's monitor reads them.
func containerProcs(rid string) ([]identity.Process, error) {
	_, id, ok := strings.Cut(rid, "://")
	if !ok || id == "" {
		return nil, fmt.Errorf("container runtime ID %q: the backend's containers have no cgroup of their own", rid)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []identity.Process
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, err := identity.ReadProcess("/proc", pid); err == nil && p.ContainerID == id {
			out = append(out, p)
		}
	}
	return out, nil
}
