package computebench

import "sort"

const second = uint64(1e9)

// sample is a counter read at one time: fakegpu's clock (ns) and the counter's value (ns of work
// or of busy time). A counter only grows, so the difference of two samples is what happened
// between them, exactly, however far apart they were taken.
type sample struct {
	t, v uint64
}

// nearest is the index of the sample taken closest to t (samples in time order).
func nearest(s []sample, t uint64) int {
	i := sort.Search(len(s), func(i int) bool { return s[i].t >= t })
	if i == len(s) {
		return len(s) - 1
	}
	if i > 0 && t-s[i-1].t < s[i].t-t {
		return i - 1
	}
	return i
}

// rate is the counter's growth per ns between the samples nearest from and to; -1 when they are
// the same sample.
func rate(s []sample, from, to uint64) float64 {
	a, b := nearest(s, from), nearest(s, to)
	if b <= a || s[b].t <= s[a].t {
		return -1
	}
	return float64(s[b].v-s[a].v) / float64(s[b].t-s[a].t)
}

// windowRates: the rate in each whole 1 s window from `from` to `to`.
func windowRates(s []sample, from, to uint64) []float64 {
	var out []float64
	for b := from; b+second <= to; b += second {
		out = append(out, rate(s, b, b+second))
	}
	return out
}

// longRates: the rate in every LongWindow-second window after the first SkipWindows seconds,
// sliding by 1 s; a run too short for one gets a single window over what it has after
// SkipWindows, one of SkipWindows or less none (as Long does for 1 s windows).
func longRates(s []sample, from, to uint64) []float64 {
	start := from + SkipWindows*second
	if to < start+second {
		return nil
	}
	if to < start+LongWindow*second {
		return []float64{rate(s, start, start+(to-start)/second*second)}
	}
	var out []float64
	for b := start; b+LongWindow*second <= to; b += second {
		out = append(out, rate(s, b, b+LongWindow*second))
	}
	return out
}

// scale divides every rate by unit (the unthrottled rate); a missing window (-1) stays -1.
func scale(v []float64, unit float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = -1
		if x >= 0 && unit > 0 {
			out[i] = x / unit
		}
	}
	return out
}
