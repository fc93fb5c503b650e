package monitor

import (
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/identity"
)

// Event reasons of the compute check (compute_bypass.go).
const (
	ReasonComputeOutside       = "GPUComputeOutsideSlices"
	ReasonComputeOutsideKilled = "GPUComputeOutsideSlicesKilled"
)

// usable reports whether two readings of a grant entry give the allowed time between them: both
// driven by a scheduler that keeps allowed_us, beating in between, the figure not gone back (a
// new file), and far enough apart.
func usable(a, b grantObs) bool {
	return a.counting && b.counting && a.beat != b.beat && b.allowed >= a.allowed && b.at.Sub(a.at) >= minComputeWindow
}

// judgeCompute holds container c's processes on gpu to the time the scheduler allowed it there
// (obs, oldest first); false: not judged this pass. A container allowed nothing in the window is
// outside as soon as it exceeds the floor; one that was allowed time only when it exceeds the bound
// in two passes running (before: it did in the last one), so that one window of samples that does
// not line up with the pass's allowed time (a burst at the edge) never ends a process.
func (a *Accounting) judgeCompute(c *identity.Container, gpu string, obs []grantObs, procs []ComputeProcess, before bool) (ComputeUsage, bool) {
	n := len(obs)
	if n < 2 || !usable(obs[n-2], obs[n-1]) {
		return ComputeUsage{}, false
	}
	cur, from := obs[n-1], obs[n-2]
	share := func(o grantObs) float64 { return float64(cur.allowed-o.allowed) / float64(cur.at.Sub(o.at)) }
	allowed := share(from)
	if n == 3 && usable(obs[0], from) {
		from = obs[0]
		allowed = max(allowed, share(from))
	}
	never := cur.allowed == from.allowed
	margin := a.ComputeMargin
	if margin <= 0 {
		margin = DefaultComputeMargin
	}
	u := ComputeUsage{Container: c, GPU: gpu, Index: c.GPUIndex(gpu), Window: cur.at.Sub(from.at), Allowed: allowed, Margin: margin, Processes: procs}
	for _, p := range procs {
		u.Busy += p.Busy
	}
	fits := func(busy float64) bool {
		if never {
			return busy < computeFloor
		}
		return busy <= allowed+margin
	}
	u.Never = never
	u.Exceeds = !fits(u.Busy)
	u.Outside = u.Exceeds && (never || before)
	if !u.Outside {
		return u, true
	}
	// The offenders: first the processes its usage region does not list (they do not go through
	// libvgpu.so: nothing of theirs obeys the grant), then the busiest, until the rest fits. The
	// region only orders the container's own processes; what is outside is the driver's figure.
	order := append([]ComputeProcess(nil), procs...)
	sort.SliceStable(order, func(i, j int) bool {
		if ni, nj := order[i].InRegion == "no", order[j].InRegion == "no"; ni != nj {
			return ni
		}
		if order[i].Busy != order[j].Busy {
			return order[i].Busy > order[j].Busy
		}
		return order[i].PID < order[j].PID
	})
	rest := u.Busy
	for _, p := range order {
		if fits(rest) {
			break
		}
		if p.Changed {
			continue // its PID names another process of the container than the driver's record: never signalled
		}
		u.Offenders = append(u.Offenders, p)
		rest -= p.Busy
	}
	return u, true
}

// enforceCompute reports (log, Event, once per episode) every container outside its slices and,
// with enforcement kill, ends its offending processes through the memory accounting's killer (the
// same checks: the PID still names the judged process, in the judged container).
func (a *Accounting) enforceCompute(rep *Report) {
	current := map[groupKey]bool{}
	for i := range rep.Compute {
		u := &rep.Compute[i]
		if !u.Outside {
			continue
		}
		gk := groupKey{u.Container.Key, u.GPU}
		current[gk] = true
		msg := computeMessage(u)
		if !a.compute.episodes[gk] {
			a.Logger.Info("Container busy on a GPU outside its slices by the driver's samples", "pod", u.Container.Pod.String(),
				"podUID", u.Container.PodUID, "container", u.Container.Container, "gpu", u.GPU, "busy", u.Busy, "allowed", u.Allowed,
				"margin", u.Margin, "window", u.Window, "offenders", pids(u.Offenders), "enforcement", a.Enforcement)
			a.event(u.Container, ReasonComputeOutside, msg)
		}
		if a.Enforcement != v1.EnforcementKill {
			continue
		}
		killer := a.Killer
		if killer == nil {
			killer = PidfdKiller{ProcRoot: a.ProcRoot}
		}
		for _, o := range u.Offenders {
			if err := killer.Kill(o.ProcessUsage, u.Container); err != nil {
				a.Logger.Error(err, "Process busy outside its container's slices not killed", "pod", u.Container.Pod.String(),
					"container", u.Container.Container, "pid", o.PID)
				continue
			}
			rep.ComputeKilled = append(rep.ComputeKilled, o.ProcessUsage)
			a.Logger.Info("Killed a process busy outside its container's slices", "pod", u.Container.Pod.String(),
				"container", u.Container.Container, "gpu", u.GPU, "pid", o.PID, "containerPID", o.NSPID, "busy", o.Busy)
			a.event(u.Container, ReasonComputeOutsideKilled, fmt.Sprintf("killed (SIGKILL) process %s: %s", pidText(o.ProcessUsage), msg))
		}
	}
	a.compute.episodes = current
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.compute.kills == nil {
		a.compute.kills = map[identity.Key]int{}
	}
	for _, p := range rep.ComputeKilled {
		a.compute.kills[p.Key]++
	}
}

// computeKills returns the processes killed for compute outside the slices, by container.
func (a *Accounting) computeKills() map[identity.Key]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[identity.Key]int, len(a.compute.kills))
	for k, n := range a.compute.kills {
		out[k] = n
	}
	return out
}

func computeMessage(u *ComputeUsage) string {
	var offs []string
	notInRegion := false
	for _, o := range u.Offenders {
		offs = append(offs, fmt.Sprintf("%s busy %.2f", pidText(o.ProcessUsage), o.Busy))
		notInRegion = notInRegion || o.InRegion == "no"
	}
	cause := "a process that does not obey the container's grant (one that does not go through libvgpu.so: LD_PRELOAD of the driver, dlmopen, glibc's own dlsym, a static binary)"
	if notInRegion {
		cause = "a process the container's usage region does not list: it does not go through libvgpu.so (LD_PRELOAD of the driver, dlmopen, glibc's own dlsym, a static binary)"
	}
	return fmt.Sprintf("container %s was busy %.2f of GPU %s by the driver's samples over the last %s, where the node scheduler allowed it %.2f (its slices, free time and drains; margin %.2f): work outside its slices by %s. Likely cause: %s",
		u.Container.Container, u.Busy, u.GPU, u.Window.Round(100*time.Millisecond), u.Allowed, u.Margin, strings.Join(offs, ", "), cause)
}

func pidText(p ProcessUsage) string {
	if p.NSPID != 0 {
		return fmt.Sprintf("%d (%d in its container)", p.PID, p.NSPID)
	}
	return fmt.Sprint(p.PID)
}

func pids(ps []ComputeProcess) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = p.PID
	}
	return out
}
