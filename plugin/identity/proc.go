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
func ReadProcess(procRoot string, pid int) (Process, error) {
	p := Process{PID: pid}
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	stat, err := readProc(filepath.Join(dir, "stat"))
	if err != nil {
		return p, err
	}
	if p.StartTime, err = parseStartTime(stat); err != nil {
		return p, fmt.Errorf("%s/stat: %w", dir, err)
	}
	cg, err := readProc(filepath.Join(dir, "cgroup"))
	if err != nil {
		return p, err
	}
	p.PodUID, p.ContainerID = ParseCgroup(cg)
	status, err := readProc(filepath.Join(dir, "status"))
	if err != nil {
		return p, err
	}
	p.NSPID = parseNSPID(status)
	return p, nil
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

// parseStartTime reads field 22 of /proc/<pid>/stat. The command name
// (field 2) is the process's to choose, parentheses and spaces included, so
// fields are counted after its last ')'.
func parseStartTime(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("no ')' after the command name")
	}
	f := bytes.Fields(stat[i+1:])
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 20", len(f))
	}
	return strconv.ParseUint(string(f[19]), 10, 64)
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
