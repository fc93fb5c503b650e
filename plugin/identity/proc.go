package identity

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// Process is a host process as the node sees it.
type Process struct {
	// PID is the process's ID in the reader's PID namespace (the node's: the
	// monitor runs with the host's).
	PID int
	// NSPID is its ID in its own, innermost PID namespace (what the process
	// calls itself, and what its usage region records); 0 when unknown.
	NSPID int
	// StartTime is when it started, in clock ticks since boot (/proc/<pid>/stat
	// field 22): with PID, it names one process even after the PID is reused.
	StartTime uint64
	// PodUID and ContainerID are what its cgroup names (ParseCgroup).
	PodUID      types.UID
	ContainerID string
}

// maxProcFile bounds a read of a /proc file (cgroup paths of nested
// hierarchies stay far below this).
const maxProcFile = 64 << 10

// ErrNoProcess is returned when the process is gone.
var ErrNoProcess = errors.New("no such process")

// ReadProcess reads what identifies pid from procRoot ("/proc"): its cgroup,
// its innermost namespace PID and its start time. Every read is bounded;
// /proc's files are the kernel's, not the container's, but the container
// chooses how deep and long its cgroup path is (within its own subtree).
//
// The cgroup is a live thread's (cgroupOf): a process whose main thread has
// exited while its other threads run (and hold its GPU memory) belongs to its
// container like any other. The start time is read before and after the
// cgroup: a PID that ended and was reused meanwhile is ErrNoProcess, never
// the first process's start time with the second one's cgroup.
func ReadProcess(procRoot string, pid int) (Process, error) {
	p := Process{PID: pid}
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	first, err := readStat(filepath.Join(dir, "stat"))
	if err != nil {
		return p, err
	}
	cg, err := cgroupOf(dir, first)
	if err != nil {
		return p, err
	}
	p.StartTime = first.StartTime
	p.PodUID, p.ContainerID = ParseCgroup(cg)
	status, err := readProc(filepath.Join(dir, "status"))
	if err != nil {
		return p, err
	}
	p.NSPID = parseNSPID(status)
	return p, nil
}

// ReadStartTime reads only pid's start time (/proc/<pid>/stat): with a Process read earlier, it
// tells whether the PID still names that process (its cgroup and NSpid then still hold).
func ReadStartTime(procRoot string, pid int) (uint64, error) {
	st, err := readStat(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	return st.StartTime, nil
}

// maxThreadsLooked bounds how many threads of one process cgroupOf tries.
// Only a process's main thread can stay exiting for long (a zombie leader
// waits for its last thread); another thread is exiting for microseconds.
const maxThreadsLooked = 1024

// cgroupOf reads the cgroup file of a live thread of the process in dir whose
// stat was leader, and checks afterwards that the PID still names that
// process. The leader's own file is read while the leader is not exiting;
// else a thread's (task/<tid>/cgroup). On cgroup v1 the file of an exiting
// task names the root of every hierarchy (the kernel's proc_cgroup_show), so
// a process whose main thread has exited would read as the host's; v2 keeps
// the cgroup, but one rule serves both. A file counts only if its thread is
// still not exiting once it was read: PF_EXITING is never cleared, so it was
// not exiting during the read either.
func cgroupOf(dir string, leader procStat) ([]byte, error) {
	statPath := filepath.Join(dir, "stat")
	if !leader.exiting() {
		cg, err := readProc(filepath.Join(dir, "cgroup"))
		if err != nil {
			return nil, err
		}
		now, err := restat(statPath, leader)
		if err != nil {
			return nil, err
		}
		if !now.exiting() {
			return cg, nil
		}
	}
	cg, err := liveThreadCgroup(dir)
	if err != nil {
		return nil, err
	}
	if _, err := restat(statPath, leader); err != nil {
		return nil, err
	}
	return cg, nil
}

// restat reads the main thread's stat again: ErrNoProcess when the PID no
// longer names the process first read (gone, or another one's since).
func restat(statPath string, first procStat) (procStat, error) {
	now, err := readStat(statPath)
	if err != nil {
		return now, err
	}
	if now.StartTime != first.StartTime {
		return now, fmt.Errorf("%s: %w (another process took its PID while it was read)", statPath, ErrNoProcess)
	}
	return now, nil
}

// liveThreadCgroup returns the cgroup file of the first thread of dir's
// process that is not exiting, other than the main thread.
func liveThreadCgroup(dir string) ([]byte, error) {
	taskDir := filepath.Join(dir, "task")
	f, err := os.Open(taskDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("%s: %w", taskDir, ErrNoProcess)
		}
		return nil, err
	}
	defer f.Close()
	main := filepath.Base(dir)
	looked := 0
	for looked < maxThreadsLooked {
		names, rerr := f.Readdirnames(64)
		for _, tid := range names {
			if tid == main {
				continue
			}
			if looked++; looked > maxThreadsLooked {
				break
			}
			tdir := filepath.Join(taskDir, tid)
			cg, err := readProc(filepath.Join(tdir, "cgroup"))
			if err != nil {
				continue // the thread ended
			}
			if st, err := readStat(filepath.Join(tdir, "stat")); err != nil || st.exiting() {
				continue
			}
			return cg, nil
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return nil, fmt.Errorf("%s: no thread left that is not exiting: %w", taskDir, ErrNoProcess)
			}
			return nil, fmt.Errorf("list %s: %w", taskDir, rerr)
		}
	}
	return nil, fmt.Errorf("%s: none of the first %d threads is a live one", taskDir, maxThreadsLooked)
}

func readProc(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("%s: %w", path, ErrNoProcess)
		}
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxProcFile+1))
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("%s: %w", path, ErrNoProcess)
		}
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxProcFile {
		return nil, fmt.Errorf("%s: longer than %d bytes", path, maxProcFile)
	}
	return b, nil
}

// procStat is what /proc/<pid>/stat (or a thread's, task/<tid>/stat) says
// about who the task is and whether it is ending.
type procStat struct {
	State byte   // field 3: R, S, D, Z (zombie), X (dead) ...
	Flags uint64 // field 9: the kernel's PF_* flags
	// StartTime is field 22: when the task started, in clock ticks since boot
	// as the reader's time namespace counts them.
	StartTime uint64
}

// pfExiting is the kernel's PF_EXITING: the task is in do_exit (set first,
// never cleared).
const pfExiting = 0x4

// exiting reports whether the task has begun to exit (or is a zombie).
func (s procStat) exiting() bool {
	return s.Flags&pfExiting != 0 || s.State == 'Z' || s.State == 'X' || s.State == 'x'
}

func readStat(path string) (procStat, error) {
	b, err := readProc(path)
	if err != nil {
		return procStat{}, err
	}
	st, err := parseStat(b)
	if err != nil {
		return procStat{}, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

// parseStat reads fields 3, 9 and 22 of /proc/<pid>/stat. The command name
// (field 2) is the process's to choose, parentheses and spaces included, so
// fields are counted after its last ')'.
func parseStat(stat []byte) (procStat, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return procStat{}, errors.New("no ')' after the command name")
	}
	f := bytes.Fields(stat[i+1:])
	// f[0] is field 3 (state); field 9 is f[6], field 22 f[19].
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("%d fields after the command name, want at least 20", len(f))
	}
	if len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("state %q is not one letter", f[0])
	}
	flags, err := strconv.ParseUint(string(f[6]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("flags: %w", err)
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("start time: %w", err)
	}
	return procStat{State: f[0][0], Flags: flags, StartTime: start}, nil
}

// parseNSPID returns the last ID of the "NSpid:" line (the innermost
// namespace's), 0 when absent.
func parseNSPID(status []byte) int {
	for _, line := range bytes.Split(status, []byte{'\n'}) {
		rest, ok := bytes.CutPrefix(line, []byte("NSpid:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return 0
		}
		n, err := strconv.Atoi(string(f[len(f)-1]))
		if err != nil {
			return 0
		}
		return n
	}
	return 0
}
