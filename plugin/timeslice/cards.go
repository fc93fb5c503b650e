package timeslice

import "strings"

// ClockGain is the part of a GPU's SM clock gain over its clock at full load that is work: a
// partly idle power-capped GPU clocks higher, but its kernels, partly bound by memory and latency,
// do less more than the clock says. A slice is charged its time times 1 + (clock / full − 1) ×
// gain (speed.go).
//
// By card, from runs of PyTorch bf16 GEMMs beside the clock (docs/benchmarks.md, "Where the time
// goes"); any other card is charged the whole gain (1): never more work than charged, so no
// container over its limit (it may do less).
func ClockGain(name string) float64 {
	switch {
	case strings.HasPrefix(name, "NVIDIA H200"):
		// 30 % duty: SM clock 1862–1980 MHz against 1503 at full load (+28 %), work per busy
		// second +17 % (2026-12-01, fourth run): 0.61.
		return 0.61
	case strings.HasPrefix(name, "NVIDIA H100"):
		// Charged the whole gain, 30 % + 50 % did 0.270 / 0.460 and 20 + 30 + 40 % 0.183 / 0.271
		// / 0.371 (8–10 % under). Measured 2026-12-07: in the slices the clock 1659–1709 MHz
		// against 1401 at full load (×1.18–1.22), the work per second of slice ×1.05–1.08:
		// 0.28–0.30 (docs/benchmarks.md, "Compute shares on every card").
		return 0.3
	}
	return 1
}
