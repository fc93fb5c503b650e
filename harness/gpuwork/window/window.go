// Package window turns readings of a counter that only grows (fakegpu's completed work of a
// container, a GPU's busy time: harness/gpuwork) into the figures a compute limit is judged by:
// its rate in every 1 s window, in every 10 s window after the first 2 s (sliding by 1 s), and
// its longest stall. A counter only grows, so the difference of two readings is exactly what
// happened between them, however far apart they were taken.
package window

import "sort"

// Second is a second in the readings' unit (ns).
const Second = uint64(1e9)

// SkipSeconds are the 1 s windows after a start before the limit is specified to hold.
const SkipSeconds = 2

// LongSeconds is the length of the window the limit is judged over.
const LongSeconds = 10

// Sample is a counter read at one time: fakegpu's clock (ns) and the counter's value (ns of work
// or of busy time).
type Sample struct {
	T, V uint64
}

// Nearest is the index of the sample taken closest to t (samples in time order).
func Nearest(s []Sample, t uint64) int {
	i := sort.Search(len(s), func(i int) bool { return s[i].T >= t })
	if i == len(s) {
		return len(s) - 1
	}
	if i > 0 && t-s[i-1].T < s[i].T-t {
		return i - 1
	}
	return i
}

// Rate is the counter's growth per ns between the samples nearest from and to; -1 when they are
// the same sample.
func Rate(s []Sample, from, to uint64) float64 {
	a, b := Nearest(s, from), Nearest(s, to)
	if b <= a || s[b].T <= s[a].T {
		return -1
	}
	return float64(s[b].V-s[a].V) / float64(s[b].T-s[a].T)
}

// Seconds is the rate in each whole 1 s window from `from` to `to`.
func Seconds(s []Sample, from, to uint64) []float64 {
	var out []float64
	for b := from; b+Second <= to; b += Second {
		out = append(out, Rate(s, b, b+Second))
	}
	return out
}

// Long is the rate in every LongSeconds window after the first SkipSeconds, sliding by 1 s; a
// run too short for one gets a single window over what it has after SkipSeconds, one of
// SkipSeconds or less none.
func Long(s []Sample, from, to uint64) []float64 {
	start := from + SkipSeconds*Second
	if to < start+Second {
		return nil
	}
	if to < start+LongSeconds*Second {
		return []float64{Rate(s, start, start+(to-start)/Second*Second)}
	}
	var out []float64
	for b := start; b+LongSeconds*Second <= to; b += Second {
		out = append(out, Rate(s, b, b+LongSeconds*Second))
	}
	return out
}

// Scale divides every rate by unit (the unthrottled rate); a missing window (-1) stays -1.
func Scale(v []float64, unit float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = -1
		if x >= 0 && unit > 0 {
			out[i] = x / unit
		}
	}
	return out
}

// LongestStall is the longest time between two samples taken from `from` to `to` that read the
// same value (the counter did not move for at least that long), and the time of the first of
// them. The stall itself is at most two reading intervals longer (it began after the last reading
// that saw the counter move and ended before the next one).
func LongestStall(s []Sample, from, to uint64) (length, at uint64) {
	first := -1 // the first sample of the current run of equal values
	for k, x := range s {
		if x.T < from || x.T > to {
			first = -1
			continue
		}
		if first < 0 || s[first].V != x.V {
			first = k
			continue
		}
		if d := x.T - s[first].T; d > length {
			length, at = d, s[first].T
		}
	}
	return length, at
}
