package timeslice

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// LockName is the file in the grant directory whose lock one scheduler holds for its whole life
// (a dot file: never read as a container's grant). Two schedulers driving the same grant files
// write each other's words: one pod fell to 0.01 of its GPU (a DaemonSet rollout with surge, a
// copy started by hand, a restart overlapping its predecessor).
const LockName = ".vgpu-scheduler.lock"

// Instance is the lock of the one scheduler of a grant directory. The kernel drops it when the
// process ends, however it ends: the next scheduler takes it at once.
type Instance struct {
	f *os.File
}

// Claim takes the grant directory's scheduler lock, or fails at once naming the scheduler that
// holds it (what it wrote into the file: its host, pid and start).
func Claim(grantDir string, now time.Time) (*Instance, error) {
	if err := os.MkdirAll(grantDir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(grantDir, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("scheduler lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := make([]byte, 256)
		n, _ := f.ReadAt(holder, 0)
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another vgpu-scheduler drives %s (%s): one scheduler per hook path; stop that one first "+
				"(its DaemonSet must roll with maxSurge 0)", grantDir, describeHolder(holder[:n]))
		}
		return nil, fmt.Errorf("scheduler lock %s: %w", path, err)
	}
	host, _ := os.Hostname()
	me := fmt.Sprintf("host %s, pid %d, since %s\n", host, os.Getpid(), now.UTC().Format(time.RFC3339))
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(me), 0) // who holds it: for the next one's error only
	}
	return &Instance{f: f}, nil
}

func describeHolder(b []byte) string {
	s := strings.TrimSpace(strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, string(b)))
	if s == "" {
		return "it has not said who it is yet"
	}
	return s
}

// Release gives the lock up (the scheduler is ending); the file no longer names it.
func (i *Instance) Release() error {
	_ = i.f.Truncate(0)
	return i.f.Close()
}
