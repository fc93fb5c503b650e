// Package computebench measures the compute limit: a launchprobe workload runs unlimited and
// limited (per policy) on fakegpu or a real GPU, and each run is reported as achieved/unlimited
// per 1 s window and per 10 s window after the first 2 s (the limit's specification).
package computebench

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/limitbed/limitbed/harness/gpuwork/window"
)

// SkipWindows are the 1 s windows before the limit is specified to hold.
const SkipWindows = window.SkipSeconds

// LongWindow is the number of 1 s windows the limit is judged over.
const LongWindow = window.LongSeconds

// ProbeResult is launchprobe's JSON line.
type ProbeResult struct {
	Launches     int       `json:"launches"`
	LaunchError  int       `json:"launch_error"`
	SyncError    int       `json:"sync_error"`
	BusyFraction float64   `json:"busy_fraction"`
	Windows      []float64 `json:"windows"`
	ElapsedS     float64   `json:"elapsed_s"` // the run and the wait for its queued work
	Waits        []float64 `json:"waits"`     // per window: the time its threads waited for a CPU, over the window's
	Error        string    `json:"error"`
}

// Starved reports whether the machine kept a probe waiting for a CPU, in some window after
// SkipWindows, for at least tol of the window: long enough to move that window's figure by the
// tolerance without the limit doing anything. A bound missed in such a run says nothing about
// the limit, and the tests measure it again; one missed in a run not starved fails.
func Starved(waits []float64, tol float64) bool {
	for i, w := range waits {
		if i >= SkipWindows && w >= tol {
			return true
		}
	}
	return false
}

// ParseProbe decodes launchprobe's output (its one JSON line).
func ParseProbe(out []byte) (ProbeResult, error) {
	var r ProbeResult
	if err := json.Unmarshal(out, &r); err != nil {
		return r, fmt.Errorf("launchprobe output %q: %w", out, err)
	}
	if r.Error != "" {
		return r, fmt.Errorf("launchprobe: %s", r.Error)
	}
	if r.LaunchError != 0 || r.SyncError != 0 {
		return r, fmt.Errorf("launchprobe: launch error %d, sync error %d", r.LaunchError, r.SyncError)
	}
	if r.Launches == 0 || len(r.Windows) == 0 {
		return r, fmt.Errorf("launchprobe launched nothing (%d launches, %d windows)", r.Launches, len(r.Windows))
	}
	for _, w := range r.Windows {
		if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
			return r, fmt.Errorf("launchprobe window %v is not a fraction", w)
		}
	}
	return r, nil
}

// Steady is the mean of the windows after SkipWindows, or of all of them when there are no more.
func Steady(w []float64) float64 {
	if len(w) > SkipWindows {
		w = w[SkipWindows:]
	}
	return mean(w)
}

// Ratios divides every window by the unlimited figure.
func Ratios(w []float64, unlimited float64) []float64 {
	out := make([]float64, len(w))
	for i, v := range w {
		if unlimited > 0 {
			out[i] = v / unlimited
		}
	}
	return out
}

// Long is every LongWindow-second window after SkipWindows (sliding by one second); a run too
// short for one gets a single window over what it has after SkipWindows; one of SkipWindows or
// less gets none.
func Long(w []float64) []float64 {
	if len(w) <= SkipWindows {
		return nil
	}
	w = w[SkipWindows:]
	if len(w) <= LongWindow {
		return []float64{mean(w)}
	}
	out := make([]float64, 0, len(w)-LongWindow+1)
	for i := 0; i+LongWindow <= len(w); i++ {
		out = append(out, mean(w[i:i+LongWindow]))
	}
	return out
}

func mean(w []float64) float64 {
	if len(w) == 0 {
		return 0
	}
	s := 0.0
	for _, v := range w {
		s += v
	}
	return s / float64(len(w))
}
