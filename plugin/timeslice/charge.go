package timeslice

import (
	"slices"
	"time"
)

// account charges the slices that ran over dt and credits every limited container its share of
// dt, up to one period's worth (an idle container does not save up more).
//
// A revoked slice whose work still runs beside the next one (a kernel longer than DrainWait; the
// queues of many processes) overlaps it, and the GPU time-slices their contexts: each container's
// processes with work in flight get their turns. So each is charged its contexts' part of the
// overlap: the overrunning one its processes still running over all of them, the holder the rest.
// The overrunner pays for its overrun (it is held until its credit is back: no gain from queueing
// many processes' work, nor from kernels longer than a slice), the holder pays only for what it
// got, so its slice lasts until it has had its budget. Nothing is lent and given back (a bonus paid
// out later lifted the holder over its limit for seconds), and an overlap is charged for as long as
// it runs (one dropped after 10 s ran uncharged).
//
// Every charge is GPU time times the GPU's speed against full load (speed.go): a limit is a share
// of work.
func (g *GPU) account(dt time.Duration, den int, now time.Time) {
	busy := time.Duration(0)
	if g.holder != nil || len(g.over) > 0 {
		busy = dt
	}
	g.learnSpeed(now, busy)
	w := g.work(dt) // what dt of the GPU's time is worth at its speed now
	h := g.holder
	hw, total := time.Duration(0), time.Duration(0)
	if h != nil {
		hw = time.Duration(g.inFlight(h))
		total = hw
	}
	for _, o := range g.over {
		if o != h {
			total += time.Duration(g.inFlight(o))
		}
	}
	for _, o := range g.over {
		if o != h {
			g.charge(o, w*time.Duration(g.inFlight(o))/total)
		}
	}
	if h != nil {
		c := w
		if g.phase == phaseGranted {
			c = g.work(max(now.Sub(maxTime(now.Add(-dt), g.from)), 0))
		}
		c = c * hw / total
		g.charge(h, c)
		g.spent += c
	}
	owed := false
	for _, s := range g.seats {
		if s.mode != modeLimited {
			continue
		}
		// Credit stops growing at a quantum while the container has nothing to do, and at two
		// while it waits for its turn (a wait behind others' slices is made up by a longer slice,
		// not lost; a container that only claims to wait saves no more). The holder's grows
		// freely: it is being charged.
		limit := g.quantum(s, den)
		switch {
		case s == g.holder:
			// The holder's grows while it is charged, but never past what is left of its slice
			// and a waiting container's saving: a slice stretched by an overlap (charged only
			// its part) must not leave it a credit of seconds, paid out afterwards as seconds
			// over its limit.
			limit = max(g.budget-g.spent, 0) + limit*3/2
		case g.pending(s, now):
			limit = limit * 3 / 2
		}
		if s.credit < limit {
			s.credit = min(s.credit+time.Duration(share(s, den)*float64(dt)), limit)
		}
		owed = owed || (s != g.holder && g.ready(s, now, den))
	}
	if busy == 0 && owed {
		g.stats.Idle += dt
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (g *GPU) charge(s *seat, d time.Duration) {
	s.stats.Used += d
	if s.mode != modeLimited {
		return
	}
	s.credit -= d
}

// judgeOverlaps ends the overlaps whose work has drained (reported, or its processes are gone),
// or whose container holds the GPU again (its slice is charged whole).
func (g *GPU) judgeOverlaps(now time.Time) {
	_ = now
	g.over = slices.DeleteFunc(g.over, func(s *seat) bool {
		return s == g.holder || s.drained(s.grant)
	})
}

// inFlight is how many of s's processes have work on the GPU under its slice, as its report says
// (joins not yet drained), at least one: a GPU time-slices between contexts, so that is its part of
// an overlap. A container that reports fewer than it runs takes part of its neighbour's turn: the
// node monitor compares each container's GPU time by the driver's record with its slices.
func (g *GPU) inFlight(s *seat) int {
	j := s.obs.Join
	if s.blind || j.Grant != s.grant || j.Joins <= j.Drains {
		return 1
	}
	return int(j.Joins - j.Drains)
}
