package identity

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/internal/proctest"
	"github.com/limitbed/limitbed/internal/tier"
)

// statLine is a /proc/<pid>/stat line with the fields parseStat reads.
func statLine(pid int, comm string, state byte, flags, start uint64) string {
	f := make([]string, 0, 50)
	for i := 4; i <= 52; i++ {
		switch i {
		case 9:
			f = append(f, strconv.FormatUint(flags, 10))
		case 22:
			f = append(f, strconv.FormatUint(start, 10))
		default:
			f = append(f, strconv.Itoa(i))
		}
	}
	return fmt.Sprintf("%d (%s) %c %s\n", pid, comm, state, strings.Join(f, " "))
}

func TestParseStat(t *testing.T) {
	for _, c := range []struct {
		name, line string
		want       procStat
		exiting    bool
		bad        bool
	}{
		{"running", statLine(7, "sleep", 'S', 4194560, 123456), procStat{'S', 4194560, 123456}, false, false},
		{"a command name with ') (' and spaces", statLine(7, "a) (b c) Z 1", 'R', 0, 9), procStat{'R', 0, 9}, false, false},
		{"zombie main thread", statLine(7, "p", 'Z', 4227084, 77), procStat{'Z', 4227084, 77}, true, false},
		{"exiting, state not yet Z", statLine(7, "p", 'D', 0x400044, 77), procStat{'D', 0x400044, 77}, true, false},
		{"dead", statLine(7, "p", 'X', 0, 77), procStat{'X', 0, 77}, true, false},
		{"no ')'", "7 (p S 1 2 3", procStat{}, false, true},
		{"short", "7 (p) S 1 2 3\n", procStat{}, false, true},
		{"two-letter state", strings.Replace(statLine(7, "p", 'S', 0, 1), ") S ", ") SS ", 1), procStat{}, false, true},
		{"bad flags", "7 (p) S 4 5 6 7 8 -1 10 11 12 13 14 15 16 17 18 19 20 21 22 23\n", procStat{}, false, true},
		{"bad start", "7 (p) S 4 5 6 7 8 0 10 11 12 13 14 15 16 17 18 19 20 21 x 23\n", procStat{}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseStat([]byte(c.line))
			if (err != nil) != c.bad {
				t.Fatalf("parseStat(%q) = %+v, %v; want error %v", c.line, got, err, c.bad)
			}
			if !c.bad && (got != c.want || got.exiting() != c.exiting) {
				t.Errorf("parseStat(%q) = %+v (exiting %v), want %+v (exiting %v)", c.line, got, got.exiting(), c.want, c.exiting)
			}
		})
	}
}

// parseStat never panics, and reads back what a stat line written from its fields says, whatever
// the command name.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte(statLine(7, "sleep", 'S', 4194560, 123456)), "a) (b", byte('Z'), uint64(4), uint64(1))
	f.Add([]byte("7 (p) S 1"), "", byte('R'), uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, raw []byte, comm string, state byte, flags, start uint64) {
		_, _ = parseStat(raw)
		if state <= ' ' || state == ')' || state > '~' || strings.ContainsAny(comm, "\n") {
			return
		}
		got, err := parseStat([]byte(statLine(42, comm, state, flags, start)))
		if err != nil || got != (procStat{state, flags, start}) {
			t.Fatalf("comm %q state %q flags %d start %d: %+v, %v", comm, state, flags, start, got, err)
		}
	})
}

// fakeTask writes a task's stat and cgroup under dir.
func fakeTask(t *testing.T, dir string, pid int, state byte, flags uint64, cgroup string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"stat": statLine(pid, "p", state, flags, 5555), "cgroup": cgroup} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A process whose main thread has exited while another thread runs is its container's: on
// cgroup v1 the main thread's /proc/<pid>/cgroup names the root of every hierarchy (it is
// exiting), so the cgroup is read from a live thread's task/<tid>/cgroup; a thread that is exiting
// itself is passed over. On v2 the main thread's file keeps the cgroup, and a live thread's says
// the same. Before, the v1 process read as a host process.
func TestReadProcessMainThreadExited(t *testing.T) {
	const pid = 4242
	v1Root := "9:pids:/\n4:memory:/\n1:name=systemd:/\n0::/\n"
	v1Ctr := "9:pids:/docker/" + cid + "\n4:memory:/docker/" + cid + "\n1:name=systemd:/docker/" + cid + "\n0::/\n"
	v2Ctr := "0::/kubepods/pod" + uid + "/" + cid + "\n"
	for _, c := range []struct {
		name            string
		leader, exiting string // cgroup files of the main thread and of an exiting thread
		live            string // a live thread's ("" none)
		wantID          string
		wantGone        bool
	}{
		{"cgroup v1", v1Root, v1Root, v1Ctr, cid, false},
		{"cgroup v2", v2Ctr, v2Ctr, v2Ctr, cid, false},
		{"every thread exiting", v1Root, v1Root, "", "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, strconv.Itoa(pid))
			fakeTask(t, dir, pid, 'Z', 0x400044|pfExiting, c.leader)
			fakeTask(t, filepath.Join(dir, "task", strconv.Itoa(pid)), pid, 'Z', 0x400044|pfExiting, c.leader)
			fakeTask(t, filepath.Join(dir, "task", "4243"), 4243, 'R', 0x400040|pfExiting, c.exiting)
			if c.live != "" {
				fakeTask(t, filepath.Join(dir, "task", "4244"), 4244, 'S', 0x400040, c.live)
			}
			if err := os.WriteFile(filepath.Join(dir, "status"), []byte("State:\tZ (zombie)\nNSpid:\t4242\t12\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			p, err := ReadProcess(root, pid)
			if c.wantGone {
				if !errors.Is(err, ErrNoProcess) {
					t.Fatalf("ReadProcess = %+v, %v; want ErrNoProcess", p, err)
				}
				return
			}
			if err != nil || p.ContainerID != c.wantID || p.StartTime != 5555 || p.NSPID != 12 {
				t.Fatalf("ReadProcess = %+v, %v; want container %s, start 5555, NSpid 12", p, err, c.wantID)
			}
		})
	}
}

// The same with a real process in a real cgroup: its main thread exits, another runs on. This
// machine's cgroup (v1 where /sys/fs/cgroup is not the unified hierarchy) decides which case it is.
func TestReadProcessMainThreadExitedReal(t *testing.T) {
	tier.Require(t, tier.Root.For("a cgroup it moves a process into"))
	bin := cbuild.Program(t, nil, "testdata/leaderexits.c")
	cg := proctest.NewCgroup(t)
	c := exec.Command(bin)
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	pid := c.Process.Pid
	cg.Join(t, pid)
	if _, err := in.Write([]byte("exit\n")); err != nil {
		t.Fatal(err)
	}
	proctest.WaitState(t, pid, 'Z')
	main, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	t.Logf("cgroup v1 %v; the exited main thread's cgroup file:\n%s", cg.V1, main)
	p, err := ReadProcess("/proc", pid)
	if err != nil || p.ContainerID != cg.ID || p.StartTime == 0 {
		t.Fatalf("ReadProcess = %+v, %v; want container %s", p, err, cg.ID)
	}
	if err := c.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}
