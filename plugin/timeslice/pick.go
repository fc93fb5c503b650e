package timeslice

import (
	"time"

	"github.com/limitbed/limitbed/plugin/schedproto"
)

// ready reports a limited container that is owed the GPU: pending work and a full quantum of
// credit (one period's share: it took no more than its share over the last period).
func (g *GPU) ready(s *seat, now time.Time, den int) bool {
	return s.mode == modeLimited && g.pending(s, now) && s.credit >= g.quantum(s, den)-time.Microsecond
}

// owed reports a container that may take the GPU next: a ready limited one, or an unthrottled
// one with pending work.
func (g *GPU) owed(s *seat, now time.Time, den int) bool {
	return g.ready(s, now, den) || (s.mode == modeShared && g.pending(s, now))
}

// readyLimited is the limited container to run next (not except): the highest priority, then the
// longest owed; but one that has waited so long that its slice would end more than a period after
// it was owed goes first, whatever its priority (no starvation).
func (g *GPU) readyLimited(now time.Time, den int, except *seat) *seat {
	var best, urgent *seat
	for _, s := range g.seats {
		if s == except || !g.ready(s, now, den) {
			continue
		}
		if !s.waitFrom.IsZero() && now.Sub(s.waitFrom) >= g.cfg.Period-g.quantum(s, den)-g.cfg.Tick &&
			(urgent == nil || s.waitFrom.Before(urgent.waitFrom)) {
			urgent = s
		}
		if best == nil || s.id.Priority < best.id.Priority ||
			(s.id.Priority == best.id.Priority && since(s, now).Before(since(best, now))) {
			best = s
		}
	}
	if urgent != nil {
		return urgent
	}
	return best
}

// since is when s started waiting for its turn; now if it only just did.
func since(s *seat, now time.Time) time.Time {
	if s.waitFrom.IsZero() {
		return now
	}
	return s.waitFrom
}

// pickShared is the unthrottled container to run next (not except): the highest priority, then
// the one that ran longest ago.
func (g *GPU) pickShared(now time.Time, except *seat) *seat {
	var best *seat
	for _, s := range g.seats {
		if s == except || s.mode != modeShared || !g.pending(s, now) {
			continue
		}
		if best == nil || s.id.Priority < best.id.Priority ||
			(s.id.Priority == best.id.Priority && s.lastRun.Before(best.lastRun)) {
			best = s
		}
	}
	return best
}

func (g *GPU) anyOwed(now time.Time, den int, except *seat) bool {
	return g.readyLimited(now, den, except) != nil || g.pickShared(now, except) != nil
}

func (g *GPU) pick(now time.Time, den int) {
	s := g.readyLimited(now, den, nil)
	if s == nil {
		s = g.pickShared(now, nil)
	}
	if s == nil {
		return
	}
	g.nextID++
	if g.nextID == 0 {
		g.nextID = 1
	}
	s.state, s.grant = schedproto.Run, g.nextID
	s.lastRun, g.start = now, now
	g.budget, g.spent, g.from = max(s.credit, 0), 0, now.Add(g.cfg.JoinGrace)
	g.holder, g.phase = s, phaseGranted
	s.stats.Slices++
	g.stats.Switches++
	g.trace(now, EvGrant, s)
	if !s.waitFrom.IsZero() {
		if now.Sub(s.seated) >= WarmUp {
			s.stats.MaxWait = max(s.stats.MaxWait, now.Sub(s.waitFrom))
		}
		s.waitFrom = time.Time{}
	}
}
