package timeslice

import (
	"time"

	"github.com/limitbed/limitbed/plugin/schedproto"
)

// The time each container was allowed to run work on a GPU, published in its grant entry
// (allowed_us, sched.h) for the node's monitor, which holds the driver's per-process figures to it:
// a process that launches outside its container's slices (one that does not go through libvgpu.so)
// does work that this cannot explain (docs/plugin.md, "Compute outside the slices").
//
// Allowed is, per beat, the larger of two figures: the wall time its word said Run or Free, and
// what the GPU charged the container (SeatStats.Used: a revoked slice's drain, its half of an
// overlap, at the GPU's speed, never less than the time). A container that obeys its word does
// GPU work only within these. The figure only grows; a scheduler that takes a file over goes on
// from what it finds there.

// silentGap: a loop that did not step for this long may have let the container's libraries pace
// themselves (they do after 0.5 s without a beat), so the whole gap counts as allowed.
const silentGap = 250 * time.Millisecond

// allowance is one member's allowed time.
type allowance struct {
	started bool
	total   time.Duration // what the entry holds, brought up to date at each beat
	at      time.Time     // ticked up to then
	wall    time.Duration // Run or Free (or a silent gap) since the last beat
	used    time.Duration // the GPU's charge of the container at the last beat
	charged bool          // used was read
}

// tick counts the time since the last step under the state written then (m.written).
func (a *allowance) tick(m *member, now time.Time) {
	if !a.started {
		a.started, a.total, a.at = true, m.c.grant.Allowed(m.idx), now
		return
	}
	d := now.Sub(a.at)
	if d <= 0 {
		return
	}
	a.at = now
	if m.written == schedproto.Run || m.written == schedproto.Free || d >= silentGap {
		a.wall += d
	}
}

// beat adds what the container was allowed since the last beat: its Run and Free time, or what
// it was charged meanwhile where that is more.
func (a *allowance) beat(used time.Duration, known bool) time.Duration {
	add := a.wall
	if known && a.charged && used > a.used {
		add = max(add, used-a.used)
	}
	if known {
		// A charge given back (an overlap's half) lowers it: the next one counts from there.
		a.used, a.charged = used, true
	}
	a.wall = 0
	a.total += add
	return a.total
}

// beatAllowed beats every member's entry with its allowed time (l.mu held).
func beatAllowed(l *gpuLoop) {
	_, seats := l.g.Stats()
	for key, m := range l.members {
		st, known := seats[key]
		if !m.allowed.started {
			m.c.grant.Beat(m.idx)
			continue
		}
		m.c.grant.BeatAllowed(m.idx, m.allowed.beat(st.Used, known))
	}
}
