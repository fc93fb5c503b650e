package timeslice

import (
	"testing"
	"time"
)

// A process that dies under its container's slice never reports that slice's drain: the join
// word counts one joiner more than drains for ever. With live locks the node learns from the
// kernel that nobody is left running: the container goes on at its limit, alone on its GPU and
// beside a neighbour. Without them, alone, its next slice waited for that drain for ever (the
// GPU-Virt-Bench stall: its parent SIGTERMs its load generator, a process of the same pod).
func TestDeadJoiner(t *testing.T) {
	t.Parallel()
	ms := workload{kernel: time.Millisecond}
	// The phantom: one more join of the slice running 1 s in, never drained.
	phantom := func(c *simCtr) {
		added := false
		c.lies = func(c *simCtr, now time.Duration) {
			if !added && now >= time.Second && c.joined != 0 && c.rep.Join.Grant == c.joined {
				c.rep.Join.Joins++
				added = true
			}
		}
	}
	for _, beside := range []bool{false, true} {
		s := newSim(t, DefaultConfig())
		c := s.add("pod", 30, PolicyForce, 1, ms)
		c.liveLocks = true
		phantom(c)
		var n *simCtr
		if beside {
			n = s.add("neighbour", 50, PolicyForce, 1, ms)
		}
		s.run(13 * time.Second)
		within(t, "the pod whose process died", c.windows(), 0.30, simTol)
		if n != nil {
			within(t, "the neighbour", n.windows(), 0.50, simTol)
		}
	}
}

// A card whose work gains less than its clock (an H100's GEMMs: the clock 13 % over full load
// while partly idle, the work about a third of that): charged the whole clock gain, every pod ran
// 8–10 % under its limit (30 + 50 % did 0.270 / 0.460 on the card); charged the card's part of
// it (ClockGain), each holds its share of the work.
func TestSharesHoldOnACardWhoseWorkGainsLessThanItsClock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		gain   float64 // the scheduler's
		limits []int
		want   func(limit float64) (lo, hi float64)
	}{
		{"30+50 charged the card's gain", 0.3, []int{30, 50}, func(l float64) (float64, float64) { return l - simTol, l + simTol }},
		{"20+30+40 charged the card's gain", 0.3, []int{20, 30, 40}, func(l float64) (float64, float64) { return l - simTol, l + simTol }},
		// The old charge: well under (the control case).
		{"30+50 charged the whole clock", 1, []int{30, 50}, func(l float64) (float64, float64) { return l * 0.88, l * 0.95 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSim(t, DefaultConfig())
			s.boost, s.workGain = 1.13, 0.3
			s.g.SetClockGain(tc.gain)
			s.addForce(tc.limits, nil, workload{kernel: time.Millisecond})
			s.run(15 * time.Second)
			for _, c := range s.ctrs {
				// The judge: work at full load is the nominal work (speed 1 at full load).
				lo, hi := tc.want(float64(c.id.Limit) / 100)
				for i, w := range c.windows() {
					if w < lo || w > hi {
						t.Errorf("%s: window %d: %.4f, want %.3f..%.3f (all: %s)", c.id.Key, i, w, lo, hi, fmtf(c.windows()))
						break
					}
				}
			}
		})
	}
}
