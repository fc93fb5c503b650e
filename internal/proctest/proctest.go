// Package proctest gives tests real processes in real cgroups named as a container runtime names
// its scopes, so the node's code maps them to a container through /proc as on a node: the cgroup
// (v2 where the machine's /sys/fs/cgroup is the unified hierarchy, else the v1 pids hierarchy) and
// the process's state as the kernel reports it. The caller requires root (tier.Root).
package proctest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Cgroup is a cgroup of the test's own, named "limitbed-test-<ID>.scope".
type Cgroup struct {
	Path string // its directory
	ID   string // the 64-hex container ID its name carries
	V1   bool   // a v1 hierarchy (pids): a zombie's cgroup file names the root there
}

// NewCgroup makes a cgroup removed when the test ends (once its processes are gone).
func NewCgroup(tb testing.TB) *Cgroup {
	tb.Helper()
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	c := &Cgroup{ID: hex.EncodeToString(b[:])}
	base := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(base, "cgroup.controllers")); err != nil {
		base, c.V1 = filepath.Join(base, "pids"), true
	}
	c.Path = filepath.Join(base, "limitbed-test-"+c.ID+".scope")
	if err := os.Mkdir(c.Path, 0o755); err != nil {
		tb.Fatalf("make a cgroup: %v", err)
	}
	tb.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := os.Remove(c.Path)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			if time.Now().After(deadline) {
				tb.Errorf("remove cgroup %s: %v", c.Path, err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	return c
}

// Line is what /proc/<pid>/cgroup says of a process in c, as ParseCgroup reads it.
func (c *Cgroup) Line() string {
	if c.V1 {
		return "1:pids:/" + filepath.Base(c.Path) + "\n"
	}
	return "0::/" + filepath.Base(c.Path) + "\n"
}

// Join moves process pid (every thread of it) into c.
func (c *Cgroup) Join(tb testing.TB, pid int) {
	tb.Helper()
	if err := os.WriteFile(filepath.Join(c.Path, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		tb.Fatalf("move %d into %s: %v", pid, c.Path, err)
	}
}

// State is the state letter of /proc/<pid>/stat (Z: a zombie), or 0 when the process is gone.
func State(pid int) byte {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// WaitState waits up to 10 s for process pid to be in state st.
func WaitState(tb testing.TB, pid int, st byte) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for State(pid) != st {
		if time.Now().After(deadline) {
			tb.Fatalf("process %d in state %q, want %q", pid, State(pid), st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Alive reports whether process pid exists and is not a zombie.
func Alive(pid int) bool {
	st := State(pid)
	return st != 0 && st != 'Z' && st != 'X'
}
