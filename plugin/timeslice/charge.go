package timeslice

import (
	"slices"
	"time"
)

// account charges the slices that ran over dt and credits every limited container its share of
// dt, up to one period's worth (an idle container does not save up more).
//
// A revoked slice whose work still runs beside the next one (a kernel longer than DrainWait) is
// charged half of the overlap, as a GPU that time-slices the two gives it half. The next slice is
// charged all of it until that drain is reported complete, and then gets half back: a container
// that never reports its drain (or lies about running) makes its neighbour pay the whole overlap
// (never more than its limit), not gives it free time.
//
// Every charge is GPU time times the GPU's speed against full load (speed.go): a limit is a share
// of work.
func (g *GPU) account(dt time.Duration, den int, now time.Time) {
	n := time.Duration(len(g.over))
	if g.holder != nil {
		n++
	}
	busy := time.Duration(0)
	if n > 0 {
		busy = dt
	}
	g.learnSpeed(now, busy)
	w := g.work(dt) // what dt of the GPU's time is worth at its speed now
	for _, o := range g.over {
		g.charge(o, w/n)
		if h := g.holder; h != nil {
			if o.lent == nil {
				o.lent = map[*seat]time.Duration{}
			}
			o.lent[h] += (w - w/n) / time.Duration(len(g.over))
		}
	}
	if h := g.holder; h != nil {
		c := w
		if g.phase == phaseGranted {
			c = g.work(max(now.Sub(maxTime(now.Add(-dt), g.from)), 0))
		}
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
			limit = time.Duration(1 << 62)
		case g.pending(s, now):
			limit = limit * 3 / 2
		}
		if s.credit < limit {
			s.credit = min(s.credit+time.Duration(share(s, den)*float64(dt)), limit)
		}
		owed = owed || (s != g.holder && g.ready(s, now, den))
	}
	if n == 0 && owed {
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
	b := min(s.bonus, d)
	s.bonus -= b
	s.credit -= d - b
}

// judgeOverlaps ends the overlaps whose drain was reported (or that ran past OverlapMax), giving
// the half of the overlap lent to the holder back.
func (g *GPU) judgeOverlaps(now time.Time) {
	g.over = slices.DeleteFunc(g.over, func(s *seat) bool {
		drained := s.drained(s.grant)
		if !drained && now.Sub(s.revoked) < g.cfg.OverlapMax && s != g.holder {
			return false
		}
		for v, d := range s.lent {
			if drained && v.mode == modeLimited {
				v.bonus += d
				v.stats.Used -= d
			}
		}
		s.lent = nil
		return true
	})
}
