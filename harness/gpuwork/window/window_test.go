package window

import (
	"math"
	"testing"
)

// Windows are exact over the readings nearest their boundaries, whatever the readings' spacing.
func TestWindows(t *testing.T) {
	// A counter at half rate for 3 s, then full rate, read every 100 ms.
	v := func(ts uint64) uint64 {
		if ts <= 3*Second {
			return ts / 2
		}
		return 3*Second/2 + ts - 3*Second
	}
	var s []Sample
	for ts := uint64(0); ts <= 15*Second; ts += 100e6 {
		s = append(s, Sample{ts, v(ts)})
	}
	w := Seconds(s, 0, 15*Second)
	if len(w) != 15 || math.Abs(w[0]-0.5) > 1e-9 || math.Abs(w[14]-1) > 1e-9 {
		t.Errorf("1 s windows %v", w)
	}
	long := Long(s, 0, 15*Second)
	if len(long) != 4 || math.Abs(long[0]-0.95) > 1e-9 || math.Abs(long[3]-1) > 1e-9 {
		t.Errorf("10 s windows %v", long)
	}
	if l := Long(s, 0, 6*Second); len(l) != 1 || math.Abs(l[0]-(0.5+3)/4) > 1e-9 {
		t.Errorf("a short run's one window %v", l)
	}
	// Readings 30 ms off the boundaries: the window is the time between its two readings, and
	// its rate is exact over that time.
	var late []Sample
	for ts := uint64(30e6); ts <= 15*Second; ts += 100e6 {
		late = append(late, Sample{ts, v(ts)})
	}
	if r := Rate(late, 2*Second, 12*Second); math.Abs(r-float64(v(12030e6)-v(2030e6))/10e9) > 1e-12 {
		t.Errorf("rate between late readings %v", r)
	}
	if l := Long(s, 0, 2*Second); l != nil {
		t.Errorf("a 2 s run judged: %v", l)
	}
	if r := Rate([]Sample{{1, 1}}, 0, Second); r != -1 {
		t.Errorf("one reading gives a rate %v", r)
	}
	if sc := Scale([]float64{0.25, -1}, 0.5); sc[0] != 0.5 || sc[1] != -1 {
		t.Errorf("scale %v", sc)
	}
}

// The longest stall is the longest run of readings that found the counter where it was, inside
// the span asked for.
func TestLongestStall(t *testing.T) {
	ms := uint64(1e6)
	// Read every 10 ms: moving, still from 100 to 250 ms, moving, still from 400 to 460 ms, moving.
	var s []Sample
	val := uint64(0)
	for ts := uint64(0); ts <= 600*ms; ts += 10 * ms {
		if !(ts > 100*ms && ts <= 250*ms) && !(ts > 400*ms && ts <= 460*ms) {
			val += 7
		}
		s = append(s, Sample{ts, val})
	}
	for _, c := range []struct {
		name          string
		from, to      uint64
		length, start uint64
	}{
		{"whole run", 0, 600 * ms, 150 * ms, 100 * ms},
		{"after the long one", 300 * ms, 600 * ms, 60 * ms, 400 * ms},
		{"cut by the span's start", 200 * ms, 600 * ms, 60 * ms, 400 * ms},
		{"the long one's tail", 180 * ms, 600 * ms, 70 * ms, 180 * ms},
		{"always moving", 500 * ms, 600 * ms, 0, 0},
	} {
		if length, at := LongestStall(s, c.from, c.to); length != c.length || at != c.start {
			t.Errorf("%s: longest stall %d ms at %d ms, want %d ms at %d ms", c.name, length/ms, at/ms, c.length/ms, c.start/ms)
		}
	}
}
