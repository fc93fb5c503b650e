package timeslice

import (
	"github.com/limitbed/limitbed/plugin/schedproto"
)

// GPUReport is one GPU's figures and its containers'.
type GPUReport struct {
	GPU   GPUStats
	Seats map[string]SeatStats
	// Speed is the GPU's speed against full load that slices are charged by; ClockMHz and
	// FullLoadMHz the SM clocks it is judged from (0: not known).
	Speed, ClockMHz, FullLoadMHz float64
}

// Stats returns every GPU's figures.
func (n *Node) Stats() map[schedproto.UUID]GPUReport {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[schedproto.UUID]GPUReport{}
	for u, l := range n.gpus {
		l.mu.Lock()
		g, s := l.g.Stats()
		f, clk, full := l.g.Speed()
		l.mu.Unlock()
		out[u] = GPUReport{GPU: g, Seats: s, Speed: f, ClockMHz: clk, FullLoadMHz: full}
	}
	return out
}
