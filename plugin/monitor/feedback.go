package monitor

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/identity"
	"github.com/limitbed/limitbed/plugin/internal/safefile"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/region"
)

// DefaultFeedbackInterval is how often the monitor decides the `default`
// policy. A container that starts alone runs throttled for at most about
// this long (its region is stamped with the switch on, as upstream).
const DefaultFeedbackInterval = time.Second

// IdentitySource gives the node's containers as the plugin, the kubelet and
// the API server know them (package identity); *identity.Sources is one.
type IdentitySource = identity.SnapshotSource

// Feedback decides the `default` compute policy for every container of the
// node and writes it into their regions (util_switch). Each pass takes
// every region's recent_kernel (libvgpu sets it on a launch, the pass swaps
// it back to 0), so a container is active when it launched within Hold.
// A container's GPUs and priority come from Identity, never from its region:
// the region is the container's to write.
type Feedback struct {
	Dir      string         // <HOOK_PATH>/vgpu/containers
	Identity IdentitySource // required
	Hold     time.Duration  // how long a launch keeps a container active; 0: 2 s
	// Timeout bounds how long a pass waits to open and map the regions; a
	// region not mapped by then keeps its switch this pass. 0: DefaultScrapeTimeout.
	Timeout time.Duration
	Now     func() time.Time
	Logger  klog.Logger

	lastActive map[string]time.Time // by container directory; only Pass touches it
	inflight   safefile.Inflight    // regions whose open or mapping has not returned
}

// PassResult is what one pass decided, by container directory name.
type PassResult struct {
	Switch map[string]uint32
	Active map[string]bool
}

type mappedRegion struct {
	key string
	mem []byte
}

// Pass runs one decision over every region under Dir. A region that cannot
// be opened or decoded is skipped with a log line and keeps its switch. When
// the identity cannot be read, every container is unknown: each is
// throttled to its limit (fail closed) until the next pass knows better.
// In three steps: map every container's region header, read each one's
// state (taking its recent_kernel), then decide and write the switches.
func (f *Feedback) Pass(ctx context.Context) (PassResult, error) {
	if f.lastActive == nil {
		f.lastActive = map[string]time.Time{}
	}
	if f.Identity == nil {
		return PassResult{}, fmt.Errorf("feedback: no identity source: the containers' GPUs and priority are unknown")
	}
	entries, err := os.ReadDir(f.Dir)
	if err != nil {
		return PassResult{}, fmt.Errorf("feedback: list %s: %w", f.Dir, err)
	}
	snap, err := f.Identity.Snapshot(ctx)
	if err != nil {
		f.Logger.Error(err, "Container identity unknown: every container is throttled to its limit this pass")
		snap = identity.NewSnapshot(f.now(), nil)
	}
	var keys []Entry
	var files []string
	for _, de := range entries {
		if e, ok := ParseEntry(de.Name(), de.IsDir()); ok && e.Kind == KindDir {
			keys = append(keys, e)
			files = append(files, filepath.Join(f.Dir, e.Name, paths.UsageCacheName))
		}
	}
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	mapped := safefile.RunAll(&f.inflight, files, timeout, mapHeader, func(mem []byte) { _ = unix.Munmap(mem) })
	states, regions := f.readStates(keys, files, mapped, snap)
	defer func() {
		for _, r := range regions {
			_ = unix.Munmap(r.mem)
		}
	}()
	res := PassResult{Switch: Switches(states), Active: map[string]bool{}}
	prio := map[string]int32{}
	for _, s := range states {
		res.Active[s.Key] = s.Active
		prio[s.Key] = s.Priority
	}
	f.writeSwitches(regions, res.Switch, prio)
	return res, nil
}

func (f *Feedback) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

// readStates reads the state of every mapped region: whether its container launched within Hold
// (taking the region's recent_kernel) and, from the identity, its GPUs and priority. A region
// that failed to map or decode is skipped (and unmapped); the others are returned mapped, for
// the caller to write and unmap. Containers gone since the last pass are forgotten.
func (f *Feedback) readStates(keys []Entry, paths []string, mapped map[string]safefile.Result[[]byte], snap *identity.Snapshot) ([]ComputeState, []mappedRegion) {
	hold := f.Hold
	if hold <= 0 {
		hold = 2 * time.Second
	}
	t := f.now()
	seen := map[string]bool{}
	var states []ComputeState
	var regions []mappedRegion
	for i, e := range keys {
		m := mapped[paths[i]]
		if m.Err != nil {
			if safefile.ReasonOf(m.Err) != safefile.ReasonMissing {
				f.Logger.V(2).Info("Skipping region for the compute policy", "container", e.Name, "err", m.Err)
			}
			continue
		}
		mem := m.Value
		var launched bool
		err := touch(func() (err error) {
			if _, err = region.DecodeLimitbedCompute(mem); err != nil {
				return err
			}
			launched = region.TakeRecentKernel(mem)
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
		states = append(states, stateOf(e, ok && t.Sub(last) < hold, snap))
		regions = append(regions, mappedRegion{key: e.Name, mem: mem})
	}
	for k := range f.lastActive {
		if !seen[k] {
			delete(f.lastActive, k)
		}
	}
	return states, regions
}

// stateOf is a container's compute state: its activity from its region, its GPUs and priority
// from the identity only (unknown: no GPUs, the lowest priority).
func stateOf(e Entry, active bool, snap *identity.Snapshot) ComputeState {
	st := ComputeState{Key: e.Name, Active: active, Priority: math.MinInt32}
	if c, ok := snap.Container(identity.Key{PodUID: e.PodUID, Container: e.Container}); ok {
		st.Known, st.Priority = true, c.Limits.Priority
		if c.GPUSource != identity.SourceNone {
			st.GPUs = []string{}
			for _, g := range c.GPUs {
				st.GPUs = append(st.GPUs, g.UUID)
			}
		}
	}
	return st
}

// writeSwitches writes each region's decided switch, logging a change.
func (f *Feedback) writeSwitches(regions []mappedRegion, switches map[string]uint32, prio map[string]int32) {
	for _, r := range regions {
		want := switches[r.key]
		var was uint32
		if err := touch(func() error { was = region.SwapUtilSwitch(r.mem, want); return nil }); err != nil {
			f.Logger.V(2).Info("Skipping region for the compute policy", "container", r.key, "err", err)
			continue
		}
		if was != want {
			f.Logger.V(1).Info("Compute limit switch", "container", r.key, "on", want == 1, "priority", prio[r.key])
		}
	}
}

// Run passes every interval until ctx ends.
func (f *Feedback) Run(ctx context.Context, interval time.Duration) {
	tk := time.NewTicker(interval)
	defer tk.Stop()
	for {
		if _, err := f.Pass(ctx); err != nil {
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
// 1024 bytes; a page is the unit of mmap). The file is the container's: it is
// opened through safefile (no link followed, nothing but a regular file of a
// limitbed region's size, non-blocking), so a FIFO or a device node the
// container made there is never opened.
func mapHeader(path string) ([]byte, error) {
	f, _, err := safefile.OpenReadWrite(path, safefile.Exactly(region.LimitbedFileSize))
	if err != nil {
		return nil, err
	}
	defer f.Close() // the mapping outlives the descriptor; the monitor holds no locks on it
	mem, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return mem, nil
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
