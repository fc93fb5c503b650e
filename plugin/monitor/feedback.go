package monitor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/region"
)

// DefaultFeedbackInterval is how often the monitor decides the `default`
// policy. A container that starts alone runs throttled for at most about
// this long (its region is stamped with the switch on, as upstream).
const DefaultFeedbackInterval = time.Second

// Feedback decides the `default` compute policy for every container of the
// node and writes it into their regions (util_switch). Each pass takes
// every region's recent_kernel (libvgpu sets it on a launch, the pass swaps
// it back to 0), so a container is active when it launched within Hold.
type Feedback struct {
	Dir    string        // <HOOK_PATH>/vgpu/containers
	Hold   time.Duration // how long a launch keeps a container active; 0: 2 s
	Now    func() time.Time
	Logger klog.Logger

	lastActive map[string]time.Time // by container directory; only Pass touches it
}

// PassResult is what one pass decided, by container directory name.
type PassResult struct {
	Switch map[string]uint32
	Active map[string]bool
}

type mappedRegion struct {
	key string
	mem []byte
	rc  region.Compute
}

// Pass runs one decision over every region under Dir. A region that cannot
// be opened or decoded is skipped with a log line and keeps its switch.
func (f *Feedback) Pass() (PassResult, error) {
	now := time.Now
	if f.Now != nil {
		now = f.Now
	}
	hold := f.Hold
	if hold <= 0 {
		hold = 2 * time.Second
	}
	if f.lastActive == nil {
		f.lastActive = map[string]time.Time{}
	}
	entries, err := os.ReadDir(f.Dir)
	if err != nil {
		return PassResult{}, fmt.Errorf("feedback: list %s: %w", f.Dir, err)
	}
	var regions []mappedRegion
	defer func() {
		for _, r := range regions {
			_ = unix.Munmap(r.mem)
		}
	}()
	t := now()
	seen := map[string]bool{}
	var states []ComputeState
	for _, de := range entries {
		e, ok := ParseEntry(de.Name(), de.IsDir())
		if !ok || e.Kind != KindDir {
			continue
		}
		path := filepath.Join(f.Dir, e.Name, UsageCacheName)
		mem, err := mapHeader(path)
		if err != nil {
			if !os.IsNotExist(err) {
				f.Logger.V(2).Info("Skipping region for the compute policy", "container", e.Name, "err", err)
			}
			continue
		}
		var rc region.Compute
		var launched bool
		err = touch(func() (err error) {
			if rc, err = region.DecodeLimitbedCompute(mem); err != nil {
				return err
			}
			// Swap, not read-then-clear: a launch between the two would be lost.
			launched = atomic.SwapUint32(word(mem, region.LimitbedOffRecentKernel), 0) != 0
			return nil
		})
		if err != nil {
			_ = unix.Munmap(mem)
			f.Logger.V(2).Info("Skipping region for the compute policy", "container", e.Name, "err", err)
			continue
		}
		if launched {
			f.lastActive[e.Name] = t
		}
		seen[e.Name] = true
		last, ok := f.lastActive[e.Name]
		states = append(states, ComputeState{Key: e.Name, Priority: rc.Priority, Active: ok && t.Sub(last) < hold, GPUs: rc.GPUs})
		regions = append(regions, mappedRegion{key: e.Name, mem: mem, rc: rc})
	}
	for k := range f.lastActive {
		if !seen[k] {
			delete(f.lastActive, k)
		}
	}
	res := PassResult{Switch: Switches(states), Active: map[string]bool{}}
	for _, s := range states {
		res.Active[s.Key] = s.Active
	}
	for _, r := range regions {
		want := res.Switch[r.key]
		var was uint32
		if err := touch(func() error { was = atomic.SwapUint32(word(r.mem, region.LimitbedOffUtilSwitch), want); return nil }); err != nil {
			f.Logger.V(2).Info("Skipping region for the compute policy", "container", r.key, "err", err)
			continue
		}
		if was != want {
			f.Logger.V(1).Info("Compute limit switch", "container", r.key, "on", want == 1, "priority", r.rc.Priority)
		}
	}
	return res, nil
}

// Run passes every interval until ctx ends.
func (f *Feedback) Run(ctx context.Context, interval time.Duration) {
	tk := time.NewTicker(interval)
	defer tk.Stop()
	for {
		if _, err := f.Pass(); err != nil {
			f.Logger.Error(err, "Compute policy pass failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// mapHeader maps the first page of a region read-write (the header is
// 1024 bytes; a page is the unit of mmap).
func mapHeader(path string) ([]byte, error) {
	// The file is the container's: O_NOFOLLOW refuses a symlink to a host file, O_NONBLOCK keeps
	// a FIFO or device from blocking the open; fstat then insists on a regular region-sized file.
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd) // the mapping outlives the descriptor; the monitor holds no locks on it
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != region.LimitbedFileSize {
		return nil, fmt.Errorf("%s: %w: not a %d-byte regular file", path, region.ErrNotRegion, region.LimitbedFileSize)
	}
	mem, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return mem, nil
}

// word is the aligned 32-bit field at off of a mapped header, for atomics
// that the library's own atomics on the same word see.
func word(mem []byte, off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&mem[off]))
}

// touch runs f over a mapped header. The file is the container's, which can truncate it under the
// mapping at any time: the access then faults (SIGBUS), and a fault must cost this region's
// decision, not the monitor process.
func touch(f func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			err = fmt.Errorf("the region changed under its mapping: %v", r)
		}
	}()
	return f()
}
