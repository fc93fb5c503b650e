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
