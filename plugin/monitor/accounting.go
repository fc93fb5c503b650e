package monitor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"k8s.io/klog/v2"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/identity"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/paths"
)

// Driver-truth accounting: every period the monitor reads the driver's
// process list of every GPU (what each process really holds, whatever code
// it loaded), maps each host PID to its container through the node's own
// records (package identity), and holds each container's memory per GPU
// against its limit. The library's accounting lives in the container's
// processes and region, which the container controls; this does not.
//
// What the limit includes is the library's definition (docs/hamicore.md,
// "Context memory decision"): memory allocated through the API, not the
// context, modules and driver overheads. The driver's figure for a process
// includes those, so each process on the GPU is allowed ContextAllowance on
// top: a container is over when
//
//	driver bytes on the GPU > limit + processes on the GPU × ContextAllowance.

// DefaultAccountingInterval is the accounting period.
const DefaultAccountingInterval = time.Second

// DefaultContextAllowance is what each process may hold beyond the limit: a
// context and the driver's rounding of allocations to its pages (an H200
// with CUDA 13 takes 518 MiB for a context; fakegpu's profiles 300-500 MiB).
const DefaultContextAllowance = 1 << 30

// DriverLister lists every device's processes (gpu.ProcessLister).
type DriverLister interface {
	Processes() ([]gpu.DeviceProcesses, error)
}

// Accounting runs the driver-truth pass.
type Accounting struct {
	Driver   DriverLister
	Identity IdentitySource
	// Dir is <HOOK_PATH>/vgpu/containers: the regions, read only to tell
	// why a process is over (never to decide that it is).
	Dir              string
	ProcRoot         string // "/proc" when empty
	ContextAllowance uint64
	Enforcement      v1.Enforcement
	// Killer ends an offending process; nil: PidfdKiller.
	Killer Killer
	// Events records Events on pods; may be nil.
	Events EventRecorder
	// RegionTimeout bounds the reads of the regions of one pass (0: DefaultScrapeTimeout).
	RegionTimeout time.Duration
	// Busy reads the driver's per-process utilisation and GrantDir is <HOOK_PATH>/vgpu/sched, the
	// scheduler's grant files: with both, each pass also holds every container the scheduler
	// drives to the time it allowed it (compute_bypass.go). ComputeMargin: 0 = DefaultComputeMargin.
	Busy          BusySource
	GrantDir      string
	ComputeMargin float64
	Now           func() time.Time
	// Boottime is the time since boot as /proc counts process start times; nil: CLOCK_BOOTTIME.
	Boottime func() time.Duration
	Logger   klog.Logger

	mu   sync.Mutex
	last *Report

	killed   map[identity.Key]int     // kills so far, by container (under mu)
	changed  map[string]int           // records whose PID named another process, by where (under mu)
	ties     map[recordKey]*recordTie // the process each record of the driver's list stands for (tie.go)
	history  map[procKey]*procHistory // only Pass touches it
	procs    map[int]identity.Process // what each PID's /proc said, while its start time holds
	episodes map[episodeKey]bool      // (container, GPU, PID) already reported
	strays   map[int]bool             // unattributed PIDs already logged
	inflight regionInflight
	compute  computeState
}

// Report is what one pass found.
type Report struct {
	Taken time.Time
	// Usage is every container's memory per GPU it has processes on, sorted.
	Usage []ContainerUsage
	// Unattributed are processes of no known container (reported, never killed).
	Unattributed []ProcessUsage
	// Killed are the processes this pass ended.
	Killed []ProcessUsage
	// Changed are records of the driver's list whose PID names another process than the one
	// the record was first seen with, in another container or none (tie.go): reported, not
	// attributed, never signalled.
	Changed []ProcessUsage
	// Errors are devices or processes that could not be read.
	Errors []string
	// Compute is every container's compute on each GPU the scheduler drives it on, and
	// ComputeKilled the processes this pass ended for working outside their slices.
	Compute       []ComputeUsage
	ComputeKilled []ProcessUsage
}

// ProcessUsage is one process's memory on one GPU.
type ProcessUsage struct {
	GPU       string
	PID       int // the node's
	NSPID     int // its own namespace's (what its region records); 0 unknown
	StartTime uint64
	UsedBytes uint64
	// InRegion says whether the container's usage region lists the process
	// as one of its live processes: "yes", "no" (it does not go through
	// libvgpu.so), or "" when the region could not be read.
	InRegion string
	Key      identity.Key // zero for an unattributed process
	// Changed: the PID names another process of the same container than the one the driver's
	// record was first seen with (tie.go); it is judged with its container, never signalled.
	Changed bool
}

// ContainerUsage is one container's memory on one GPU, by the driver.
type ContainerUsage struct {
	Container *identity.Container
	GPU       string
	Index     int // the GPU's device index in the container; -1 when it does not hold it
	UsedBytes uint64
	// Judged is false when the container has no limit to hold it to here
	// (unlimited, MIG, limits unknown or unreadable); Why says which.
	Judged bool
	Why    string
	// LimitBytes is the container's limit on this GPU (limitsfile.Unlimited: none);
	// BoundBytes adds the allowance of its processes here.
	LimitBytes, BoundBytes uint64
	Over                   bool
	Processes              []ProcessUsage
	// Offender is the process that put the container over (when Over).
	Offender *ProcessUsage
	Cause    string
}

// Last returns the last pass's report (nil before the first).
func (a *Accounting) Last() *Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// kills returns the kills so far by container.
func (a *Accounting) kills() map[identity.Key]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[identity.Key]int, len(a.killed))
	for k, n := range a.killed {
		out[k] = n
	}
	return out
}

// Run passes every interval until ctx ends.
func (a *Accounting) Run(ctx context.Context, interval time.Duration) {
	tk := time.NewTicker(interval)
	defer tk.Stop()
	failing := "" // the last failure logged: a lasting one (no driver yet) is logged once, not every period
	for {
		start := time.Now()
		_, err := a.Pass(ctx)
		switch {
		case err != nil && err.Error() != failing:
			failing = err.Error()
			a.Logger.Error(err, "Driver-truth accounting pass failed; nothing is judged until a pass succeeds")
		case err == nil && failing != "":
			failing = ""
			a.Logger.Info("Driver-truth accounting passes again")
		}
		if took := time.Since(start); took > interval {
			a.Logger.Info("Driver-truth accounting pass took longer than its period", "took", took, "period", interval)
		}
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// Pass runs one accounting period: it reads the driver, attributes each
// process, judges each container per GPU and enforces. It fails (nothing
// judged, nothing killed) when the driver cannot be read.
func (a *Accounting) Pass(ctx context.Context) (*Report, error) {
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	var listed listing // when the list was taken: what started later is not a process it names
	listed.from = a.boottimeTicks()
	devs, err := a.Driver.Processes()
	if err != nil {
		return nil, fmt.Errorf("driver process list: %w", err)
	}
	listed.to = a.boottimeTicks()
	rep := &Report{Taken: now()}
	snap, err := a.Identity.Snapshot(ctx)
	if err != nil {
		// Without an identity no process belongs to a known container: all are reported, none judged.
		rep.Errors = append(rep.Errors, err.Error())
		snap = identity.NewSnapshot(rep.Taken, nil)
	}
	groups := a.attribute(devs, snap, listed, rep)
	a.judge(groups, rep)
	a.explain(rep)
	a.enforce(ctx, rep)
	a.checkCompute(snap, rep)
	a.mu.Lock()
	a.last = rep
	if a.killed == nil {
		a.killed = map[identity.Key]int{}
	}
	for _, p := range rep.Killed {
		a.killed[p.Key]++
	}
	a.mu.Unlock()
	return rep, nil
}

type groupKey struct {
	key identity.Key
	gpu string
}

// attribute maps every listed process to its container, grouped per
// container and GPU; processes of no known container go to Unattributed, and
// records whose PID names another process than the one they stand for
// (tie.go) to Changed.
func (a *Accounting) attribute(devs []gpu.DeviceProcesses, snap *identity.Snapshot, l listing, rep *Report) map[groupKey]*ContainerUsage {
	if a.history == nil {
		a.history = map[procKey]*procHistory{}
	}
	if a.ties == nil {
		a.ties = map[recordKey]*recordTie{}
	}
	reads := a.readListed(devs)
	a.tieListed(devs, reads, l)
	seen := map[procKey]bool{}
	listed, read := map[recordKey]bool{}, map[string]bool{}
	groups := map[groupKey]*ContainerUsage{}
	for _, d := range devs {
		if d.Err != nil {
			rep.Errors = append(rep.Errors, d.Err.Error())
			continue
		}
		read[d.UUID] = true
		for _, p := range d.Processes {
			rk := recordKey{d.UUID, p.PID}
			listed[rk] = true
			proc, err := reads[p.PID].proc, reads[p.PID].err
			if errors.Is(err, identity.ErrNoProcess) {
				continue // ended since the driver listed it
			}
			if err != nil {
				rep.Errors = append(rep.Errors, fmt.Sprintf("process %d on %s: %v", p.PID, d.UUID, err))
			}
			if p.Unknown {
				rep.Errors = append(rep.Errors, fmt.Sprintf("process %d on %s: the driver does not report its memory", p.PID, d.UUID))
			}
			pu := ProcessUsage{GPU: d.UUID, PID: p.PID, NSPID: proc.NSPID, StartTime: proc.StartTime, UsedBytes: p.UsedBytes}
			if err == nil {
				tie := a.ties[rk]
				if tie == nil { // not tied yet (tieListed): judged next pass
					rep.Changed = append(rep.Changed, pu)
					continue
				}
				if changed, same := tie.changed(proc); changed {
					a.noteChanged(tie, pu, proc, same)
					if !same {
						rep.Changed = append(rep.Changed, pu)
						continue
					}
					pu.Changed = true
				}
			}
			pk := procKey{pid: p.PID, start: proc.StartTime, gpu: d.UUID}
			seen[pk] = true
			a.observe(pk, p.UsedBytes, rep.Taken)
			c, ok := snap.Of(proc)
			if err != nil || !ok {
				rep.Unattributed = append(rep.Unattributed, pu)
				continue
			}
			a.group(groups, c, pu, p.Unknown)
		}
	}
	a.forget(seen, reads)
	a.dropTies(listed, read)
	return groups
}

// readListed reads the /proc of every PID the driver listed, once each (a process on several GPUs).
func (a *Accounting) readListed(devs []gpu.DeviceProcesses) map[int]procRead {
	root := a.ProcRoot
	if root == "" {
		root = "/proc"
	}
	reads := map[int]procRead{}
	for _, d := range devs {
		if d.Err != nil {
			continue
		}
		for _, p := range d.Processes {
			if _, ok := reads[p.PID]; !ok {
				var r procRead
				r.proc, r.err = a.readProcess(root, p.PID)
				reads[p.PID] = r
			}
		}
	}
	return reads
}

// group adds process pu of container c to its group of c on pu's GPU.
func (a *Accounting) group(groups map[groupKey]*ContainerUsage, c *identity.Container, pu ProcessUsage, unknown bool) {
	pu.Key = c.Key
	gk := groupKey{c.Key, pu.GPU}
	g := groups[gk]
	if g == nil {
		g = &ContainerUsage{Container: c, GPU: pu.GPU, Index: c.GPUIndex(pu.GPU)}
		groups[gk] = g
	}
	g.UsedBytes += pu.UsedBytes
	g.Processes = append(g.Processes, pu)
	if unknown {
		g.Why = "the driver does not report the memory of one of its processes"
	}
}

// procRead is what one pass read of a PID's /proc.
type procRead struct {
	proc identity.Process
	err  error
}

// forget drops the history of processes not seen this pass, and the /proc reads of PIDs not listed.
func (a *Accounting) forget(seen map[procKey]bool, pass map[int]procRead) {
	for k := range a.history {
		if !seen[k] {
			delete(a.history, k)
		}
	}
	for pid := range a.procs {
		if _, ok := pass[pid]; !ok {
			delete(a.procs, pid)
		}
	}
}

// readProcess reads pid's identity, from /proc the first time and, while its start time holds (the
// PID still names that process), from what was read then: a process's cgroup is the runtime's,
// set when it started, and its namespace PID does not change.
func (a *Accounting) readProcess(root string, pid int) (identity.Process, error) {
	if a.procs == nil {
		a.procs = map[int]identity.Process{}
	}
	if p, ok := a.procs[pid]; ok {
		st, err := identity.ReadStartTime(root, pid)
		if err == nil && st == p.StartTime {
			return p, nil
		}
		delete(a.procs, pid)
		if err != nil {
			return identity.Process{PID: pid}, err
		}
	}
	p, err := identity.ReadProcess(root, pid)
	if err == nil {
		a.procs[pid] = p
	}
	return p, err
}

// judge holds each group to its container's limit on that GPU.
func (a *Accounting) judge(groups map[groupKey]*ContainerUsage, rep *Report) {
	for _, g := range groups {
		c := g.Container
		g.LimitBytes = limitsfile.Unlimited
		switch {
		case g.Why != "":
		case c.MIG:
			g.Why = "MIG device: isolated by the hardware"
		case c.Limits.Source == identity.SourceNone:
			g.Why = "no limits: not a GPU container of this plugin"
		case c.Limits.Source == identity.SourceUnreadable:
			g.Why = "its limits file cannot be read"
		default:
			if c.GPUSource != identity.SourceNone && g.Index < 0 {
				g.LimitBytes = 0 // a GPU it was not given: it may hold contexts there, nothing more
			} else {
				g.LimitBytes = c.MemoryLimit(g.GPU)
			}
			if g.LimitBytes == limitsfile.Unlimited {
				g.Why = "no memory limit on this GPU"
				break
			}
			g.Judged = true
			allowance := uint64(len(g.Processes)) * a.ContextAllowance
			g.BoundBytes = g.LimitBytes + allowance
			if g.BoundBytes < g.LimitBytes {
				g.BoundBytes = limitsfile.Unlimited // saturate
			}
			g.Over = g.UsedBytes > g.BoundBytes
			if g.Over {
				g.Offender = a.offender(g)
			}
		}
		sort.Slice(g.Processes, func(i, j int) bool { return g.Processes[i].PID < g.Processes[j].PID })
		rep.Usage = append(rep.Usage, *g)
	}
	sort.Slice(rep.Usage, func(i, j int) bool {
		if ki, kj := rep.Usage[i].Container.Key.String(), rep.Usage[j].Container.Key.String(); ki != kj {
			return ki < kj
		}
		return rep.Usage[i].GPU < rep.Usage[j].GPU
	})
	sort.Slice(rep.Unattributed, func(i, j int) bool { return rep.Unattributed[i].PID < rep.Unattributed[j].PID })
}

// explain reads the usage regions to tell which processes their library sees (InRegion: a
// process its container's region does not list does not go through libvgpu.so) and, for a
// container over its limit, why its library did not stop it. A process once seen in its region
// stays seen (its slot is held while it lives), so in a steady state only the regions of
// containers that are over, or that have a process not seen there yet, are read. The region is
// the container's to write, so this only names a likely cause; what is over and who is killed
// never depends on it.
func (a *Accounting) explain(rep *Report) {
	need := map[identity.Key]bool{}
	for i := range rep.Usage {
		u := &rep.Usage[i]
		if u.Container.MIG || u.Container.Limits.Source == identity.SourceNone {
			continue
		}
		for j := range u.Processes {
			p := &u.Processes[j]
			if h := a.history[procKey{p.PID, p.StartTime, p.GPU}]; h != nil && h.inRegion {
				p.InRegion = "yes"
			} else {
				need[u.Container.Key] = true
			}
		}
		if u.Over {
			need[u.Container.Key] = true
		}
	}
	if len(need) == 0 {
		return
	}
	keys := make([]identity.Key, 0, len(need))
	for k := range need {
		keys = append(keys, k)
	}
	regions := a.readRegions(keys)
	for i := range rep.Usage {
		u := &rep.Usage[i]
		r, ok := regions[u.Container.Key]
		if !ok {
			continue
		}
		for j := range u.Processes {
			p := &u.Processes[j]
			p.InRegion = r.lists(*p)
			if h := a.history[procKey{p.PID, p.StartTime, p.GPU}]; h != nil && p.InRegion == "yes" {
				h.inRegion = true
			}
		}
		if u.Over && u.Offender != nil {
			u.Offender.InRegion = r.lists(*u.Offender)
			u.Cause = r.cause(u)
		}
	}
}

func (a *Accounting) regionPath(k identity.Key) string {
	return filepath.Join(a.Dir, k.String(), paths.UsageCacheName)
}
