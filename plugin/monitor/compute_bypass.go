package monitor

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/identity"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/schedproto"
)

// Compute outside the slices: with the node scheduler (vgpu-scheduler) a container's processes
// may run work on a GPU only while its grant says so. A process that does not go through
// libvgpu.so (the driver in LD_PRELOAD, glibc's own dlsym, dlmopen, a static binary) launches
// whenever it likes: it takes its neighbours' slices and the scheduler, which sees only what the
// library reports, cannot notice. The driver can. Every pass the monitor reads
//
//   - from each grant file (root's, written by the scheduler: trustworthy), the time the
//     scheduler allowed the container on each GPU (allowed_us, sched.h): its slices and free time,
//     and its drains past a slice as the scheduler charged them;
//   - from the driver, each process's share of each GPU since the last pass
//     (nvmlDeviceGetProcessUtilization, gpu.BusySampler), attributed to its container through
//     the node's records (package identity) as the memory accounting attributes memory.
//
// A container whose processes were busy beyond what its allowed time can explain is outside its
// slices:
//
//	busy share > allowed share + margin, in two passes running,
//	or, allowed nothing in the window: busy share ≥ computeFloor (at once).
//
// The allowed share is the larger of the last pass's and the last two passes' (the driver's
// samples cover a window of their own, which need not match the pass's). The margin (default
// 0.2 of the GPU) covers what an obeying container does beyond its grant by the samples' count:
// the windows' misalignment with the pass (a slice of up to a period, 0.1 s, on either side), a
// real GPU's samples in steps (an H200 gives 20 % steps under time-slicing, so up to 0.1), and
// copies and memsets, which the library does not gate. Two passes running: a sample window that
// ends away from the pass's end (an H200's are staggered per process) can hold a burst the pass's
// allowed time spreads thinner; the next pass's does not. A container the scheduler does not drive
// on that GPU (no grant file, an Off entry, a scheduler that stopped beating or that predates
// allowed_us) is not judged this way.

// DefaultComputeMargin is the share of a GPU a container's processes may be busy beyond the share
// the scheduler allowed it (docs/plugin.md, "Compute outside the slices").
const DefaultComputeMargin = 0.2

// computeFloor is the busy share at which a container allowed nothing in the window is judged:
// above a sample's rounding (1 %) and a stray copy's or memset's kernel.
const computeFloor = 0.05

// minComputeWindow: two observations closer than this give no share (a pass run again at once).
const minComputeWindow = 100 * time.Millisecond

// BusySource reads each GPU's per-process busy share since the last call (gpu.BusySampler).
type BusySource interface {
	Busy() ([]gpu.DeviceBusy, error)
}

// ComputeUsage is one container's compute on one GPU the scheduler drives it on, over a pass.
type ComputeUsage struct {
	Container *identity.Container
	GPU       string
	Index     int           // the GPU's index in the container (-1: not given)
	Window    time.Duration // the allowed share's window
	Busy      float64       // its processes' share of the GPU by the driver's samples
	Allowed   float64       // the share of the window the scheduler allowed it
	Margin    float64
	Never     bool // allowed nothing in the window
	Exceeds   bool // busy beyond what the allowed time explains, this pass
	Outside   bool // judged outside its slices: Exceeds, and Never or exceeded the pass before too
	Processes []ComputeProcess
	// Offenders are the processes to end, in order, until the rest fits (when Outside).
	Offenders []ComputeProcess
}

// ComputeProcess is one process's share of a GPU.
type ComputeProcess struct {
	ProcessUsage // GPU, PIDs, start time, container; InRegion when the memory accounting read it
	Busy         float64
}

// grantObs is one pass's reading of a grant entry.
type grantObs struct {
	at       time.Time
	allowed  time.Duration
	beat     uint32
	counting bool // driven (not Off), and the scheduler keeps allowed_us
}

// computeState is what the compute check keeps between passes (only Pass touches it).
type computeState struct {
	obs      map[groupKey][]grantObs // the last three readings, oldest first
	exceeded map[groupKey]bool       // judged and beyond its bound in the last pass
	episodes map[groupKey]bool       // outside and reported
	kills    map[identity.Key]int    // under Accounting.mu
}

// checkCompute judges every container the scheduler drives, then reports and enforces.
func (a *Accounting) checkCompute(snap *identity.Snapshot, rep *Report) {
	if a.Busy == nil || a.GrantDir == "" {
		return
	}
	if a.compute.obs == nil {
		a.compute.obs, a.compute.episodes = map[groupKey][]grantObs{}, map[groupKey]bool{}
	}
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	at := now()
	grants := a.readGrants(rep)
	devs, err := a.Busy.Busy()
	if err != nil {
		rep.Errors = append(rep.Errors, fmt.Sprintf("driver utilisation: %v", err))
	}
	busy := a.busyByContainer(devs, rep)
	seen, exceeded := map[groupKey]bool{}, map[groupKey]bool{}
	for key, g := range grants {
		for _, e := range g.GPU {
			gk := groupKey{key, e.UUID.String()}
			if seen[gk] {
				continue // a GPU named twice: its first entry is the scheduler's
			}
			seen[gk] = true
			o := append(a.compute.obs[gk], grantObs{at: at, allowed: e.Allowed, beat: e.Beat,
				counting: e.State != schedproto.Off && e.Counting()})
			if len(o) > 3 {
				o = o[len(o)-3:]
			}
			a.compute.obs[gk] = o
			c, ok := snap.Container(key)
			if !ok || c.MIG || err != nil {
				continue
			}
			if u, ok := a.judgeCompute(c, gk.gpu, o, busy[gk], a.compute.exceeded[gk]); ok {
				rep.Compute = append(rep.Compute, u)
				exceeded[gk] = u.Exceeds
			}
		}
	}
	for gk := range a.compute.obs {
		if !seen[gk] {
			delete(a.compute.obs, gk)
		}
	}
	a.compute.exceeded = exceeded
	sort.Slice(rep.Compute, func(i, j int) bool {
		if ki, kj := rep.Compute[i].Container.Key.String(), rep.Compute[j].Container.Key.String(); ki != kj {
			return ki < kj
		}
		return rep.Compute[i].GPU < rep.Compute[j].GPU
	})
	a.enforceCompute(rep)
}

// readGrants reads every grant file of the grant directory, by container.
func (a *Accounting) readGrants(rep *Report) map[identity.Key]schedproto.Grant {
	ents, err := os.ReadDir(a.GrantDir)
	if err != nil {
		if !os.IsNotExist(err) { // no scheduler on the node: nothing to judge
			rep.Errors = append(rep.Errors, fmt.Sprintf("grant files: %v", err))
		}
		return nil
	}
	out := map[identity.Key]schedproto.Grant{}
	for _, de := range ents {
		name, ok := strings.CutSuffix(de.Name(), schedproto.GrantSuffix)
		if !ok || !de.Type().IsRegular() {
			continue
		}
		uid, ctr, err := paths.ParseContainerKey(name)
		if err != nil {
			continue // not a name the plugin makes
		}
		g, err := schedproto.ReadGrant(filepath.Join(a.GrantDir, de.Name()))
		if err != nil {
			rep.Errors = append(rep.Errors, err.Error())
			continue
		}
		out[identity.Key{PodUID: types.UID(uid), Container: ctr}] = g
	}
	return out
}

// busyByContainer attributes every sampled process to its container, per container and GPU,
// through the memory accounting's attribution of the same pass: a sample counts for a container
// only when the driver's list of that GPU holds its PID and the pass attributed that record to
// the container (tie.go: a record whose PID now names a process of another container, or none, is
// not). A process of no known container is left out (the memory accounting reports it).
func (a *Accounting) busyByContainer(devs []gpu.DeviceBusy, rep *Report) map[groupKey][]ComputeProcess {
	listed := map[recordKey]ProcessUsage{}
	for _, u := range rep.Usage {
		for _, p := range u.Processes {
			listed[recordKey{p.GPU, p.PID}] = p
		}
	}
	out := map[groupKey][]ComputeProcess{}
	for _, d := range devs {
		if d.Err != nil {
			rep.Errors = append(rep.Errors, d.Err.Error())
			continue
		}
		for _, p := range d.Processes {
			pu, ok := listed[recordKey{d.UUID, p.PID}]
			if !ok {
				continue // not listed, unattributed, or its PID names another container's process
			}
			gk := groupKey{pu.Key, d.UUID}
			out[gk] = append(out[gk], ComputeProcess{ProcessUsage: pu, Busy: p.Share})
		}
	}
	return out
}
