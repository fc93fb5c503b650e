package timeslice

import (
	"context"
	"sync"
	"time"

	"github.com/limitbed/limitbed/plugin/schedproto"
)

// One GPU's loop: its members (the containers seated on it), its steps, grants, beats and
// bell, and the SM clock its slices are charged by.

type member struct {
	c       *ctr
	idx     int
	written schedproto.State
	id      uint32
	allowed allowance // the time the container was allowed on the GPU (allowed.go)
}

type gpuLoop struct {
	mu       sync.Mutex
	g        *GPU
	members  map[string]*member
	joined   uint32    // the last slice whose join was logged (-v=6)
	clockAt  time.Time // the SM clock was last read then
	clockErr bool      // the last reading failed (logged at the first of a run of failures)
	named    bool      // its clock gain was set (from its card's name, or Config.ClockGain)
}

// bellGap is the least time between two waits on a draining container's bell: the container can
// ring it at will, which must not make the loop spin.
const bellGap = 200 * time.Microsecond

// loop runs one GPU: observe the reports, step, write the grants that changed, beat; then sleep
// until the GPU's next step, on the holder's bell while a slice is held or drains.
func (n *Node) loop(ctx context.Context, l *gpuLoop) {
	var beat time.Time
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	sleep := func(d time.Duration) {
		timer.Reset(d)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
	}
	var woke time.Time // the holder's bell woke the loop then (see below)
	for ctx.Err() == nil {
		l.mu.Lock()
		now := n.now()
		if !woke.IsZero() {
			// What the ring announced (a first launch, a drain) happened by the time the loop
			// woke; the step after bellGap is as of then, so a slice is charged from the wake on
			// its first launch, not from a timer's late return (a loaded node's timers overshoot
			// by a millisecond, a few per cent of a slice, all of it uncharged).
			now, woke = woke, time.Time{}
		}
		next, seen := n.step(l, now, &beat)
		bell := n.bell(l, seen)
		l.mu.Unlock()
		at := n.now() // now may be a wake's, earlier: the sleep is timed from the clock
		d := min(next.Sub(at), beat.Add(Heartbeat).Sub(at))
		if d <= 0 {
			continue
		}
		if bell != nil {
			t0 := time.Now()
			if bell(d) {
				woke = n.now()
			}
			if w := time.Since(t0); w < bellGap && w < d {
				sleep(min(bellGap, d) - w)
			}
			continue
		}
		sleep(d)
	}
}

// step observes every member's report, steps the GPU, writes the grants that changed and beats
// (l.mu held). It returns when the GPU wants its next step and what each report said.
func (n *Node) step(l *gpuLoop, now time.Time, beat *time.Time) (time.Time, map[string]Observed) {
	seen := make(map[string]Observed, len(l.members))
	for key, m := range l.members {
		o := Observed{Blind: m.c.reportBad}
		if m.c.report != nil {
			e, err := m.c.report.Entry(m.idx)
			o = Observed{Entry: e, OK: err == nil, Blind: err != nil} // a fault reading it: tampered with
		}
		l.g.Observe(key, o, now)
		seen[key] = o
	}
	n.readClock(l, now)
	next := l.g.Step(now)
	for key, m := range l.members {
		m.allowed.tick(m, now) // under the state written until now
		st, id, budget := l.g.Grant(key)
		if st != m.written || ((st == schedproto.Run || st == schedproto.Free) && id != m.id) {
			m.c.grant.Set(m.idx, st, id, budget)
			m.written, m.id = st, id
			n.Logger.V(5).Info("Grant", "gpu", l.g.UUID, "container", key, "state", st, "slice", id, "budget", budget)
		}
	}
	if now.Sub(*beat) >= Heartbeat {
		beatAllowed(l)
		*beat = now
	}
	if key, g, since, ok := l.g.Holder(); ok && n.Logger.V(6).Enabled() {
		if m := l.members[key]; m != nil && m.c.report != nil {
			if e, err := m.c.report.Entry(m.idx); err == nil && e.Join.Grant == g && g != l.joined {
				l.joined = g
				n.Logger.V(6).Info("Joined", "container", key, "after", now.Sub(since))
			}
		}
	}
	return next, seen
}

// bell is the wait on the bell the loop sleeps on (l.mu held), nil for none. The holder's bell
// rings at its first launch (its slice is charged from then) and when its work drained (revoked,
// or idle: the GPU can go to the next one at once); a revoked slice that drains beside the
// holder's rings when its drain ends (Overlapping).
func (n *Node) bell(l *gpuLoop, seen map[string]Observed) func(time.Duration) bool {
	if key, ok := l.g.Draining(); ok && n.Logger.V(6).Enabled() {
		if m := l.members[key]; m != nil {
			n.Logger.V(6).Info("Draining", "container", key, "join", m.c.obsJoin(m.idx))
		}
	}
	key, ok := l.g.Draining()
	if !ok {
		key, ok = l.g.Overlapping()
	}
	if !ok {
		key, _, _, ok = l.g.Holder()
	}
	if !ok {
		return nil
	}
	m := l.members[key]
	if m == nil || m.c.report == nil || !seen[key].OK {
		return nil
	}
	r, idx, old := m.c.report, m.idx, seen[key].Bell
	// The bell as observed before the step: a ring since (a launcher that joined as its grant
	// was written) wakes the wait at once.
	return func(d time.Duration) bool {
		_ = r.WaitBell(idx, old, d)
		e, err := r.Entry(idx)
		return err == nil && e.Bell != old
	}
}

// Clocks reads a GPU's SM clock in MHz.
type Clocks interface {
	SMClock(gpu string) (uint32, error) // gpu: NVML's form, "GPU-…"
}

// readClock gives the GPU a reading of its SM clock when one is due. A GPU whose clock cannot be
// read keeps its last speed.
func (n *Node) readClock(l *gpuLoop, now time.Time) {
	if n.Clocks == nil || now.Sub(l.clockAt) < n.Config.ClockEvery {
		return
	}
	l.clockAt = now
	if !l.named {
		l.named = true
		gain := n.Config.ClockGain
		if nm, ok := n.Clocks.(interface{ Name(string) (string, error) }); ok && gain <= 0 {
			if name, err := nm.Name(l.g.UUID.String()); err == nil {
				gain = ClockGain(name)
				n.Logger.Info("Charging slices by the SM clock", "gpu", l.g.UUID, "card", name, "clockGain", gain)
			} else {
				l.named = false // asked again at the next reading
			}
		}
		l.g.SetClockGain(gain)
	}
	mhz, err := n.Clocks.SMClock(l.g.UUID.String())
	if err != nil {
		if !l.clockErr {
			n.Logger.Error(err, "Cannot read the SM clock: slices are charged at the last speed", "gpu", l.g.UUID)
		}
		l.clockErr = true
		return
	}
	if l.clockErr {
		n.Logger.Info("Reading the SM clock again", "gpu", l.g.UUID, "mhz", mhz)
	}
	l.clockErr = false
	l.g.Clock(now, float64(mhz))
}
