package timeslice

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

type recorder struct{ ev []TraceEvent }

func (r *recorder) Trace(e TraceEvent) { r.ev = append(r.ev, e) }

// Every slice of a traced run goes grant → join → revoke → drained (or released), in time order,
// with its budget; the clock readings of a power-capped GPU are there with the speed charged.
func TestTraceFollowsEverySlice(t *testing.T) {
	t.Parallel()
	s := newSim(t, DefaultConfig())
	s.boost = 1.25
	rec := &recorder{}
	s.g.SetTracer(rec)
	s.addForce([]int{30, 50}, nil, workload{kernel: time.Millisecond})
	s.run(3 * time.Second)

	type slice struct {
		key   string
		evs   []string
		grant TraceEvent
	}
	slices := map[uint32]*slice{}
	var order []uint32
	clocks, last := 0, time.Time{}
	for _, e := range rec.ev {
		if e.At.Before(last) {
			t.Fatalf("event %+v before the one it follows (%v)", e, last)
		}
		last = e.At
		switch e.Event {
		case EvClock:
			clocks++
			if e.ClockMHz <= 0 || e.Speed < 1 {
				t.Errorf("clock event without a reading or speed: %+v", e)
			}
			continue
		case EvCalib, EvLearn:
			continue
		}
		sl := slices[e.Slice]
		if sl == nil {
			if e.Event != EvGrant {
				t.Fatalf("slice %d starts with %q, not a grant", e.Slice, e.Event)
			}
			sl = &slice{key: e.Container, grant: e}
			slices[e.Slice] = sl
			order = append(order, e.Slice)
		}
		if e.Container != sl.key {
			t.Errorf("slice %d: event of %s, granted to %s", e.Slice, e.Container, sl.key)
		}
		sl.evs = append(sl.evs, e.Event)
	}
	if clocks < 100 {
		t.Errorf("%d clock events in 3 s of readings every %v", clocks, DefaultConfig().ClockEvery)
	}
	if len(order) < 40 {
		t.Fatalf("%d slices traced in 3 s of a 30+50 pair", len(order))
	}
	for _, id := range order[:len(order)-2] { // the last ones may still run
		sl := slices[id]
		got := strings.Join(sl.evs, " ")
		if got != "grant join revoke drained" && got != "grant join released" {
			t.Errorf("slice %d of %s: %q", id, sl.key, got)
		}
		if sl.grant.Budget <= 0 {
			t.Errorf("slice %d granted without a budget: %+v", id, sl.grant)
		}
	}
}

// The writer's lines are JSON with the fields the analysis reads; a write error is kept, never
// blocking the schedule, and returned by Close.
func TestTraceWriterLines(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	w := NewTraceWriter(&b)
	at := time.Unix(1700000000, 123)
	w.Trace(TraceEvent{At: at, GPU: "GPU-1", Container: "p0_main", Event: EvGrant, Slice: 7, Budget: 30 * time.Millisecond, Speed: 1.1, ClockMHz: 1980, FullMHz: 1800})
	w.Trace(TraceEvent{At: at, GPU: "GPU-1", Event: EvClock, Speed: 1, ClockMHz: 1755})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %q", len(lines), b.String())
	}
	var l traceLine
	if err := json.Unmarshal([]byte(lines[0]), &l); err != nil {
		t.Fatal(err)
	}
	want := traceLine{T: at.UnixNano(), GPU: "GPU-1", C: "p0_main", Ev: EvGrant, Slice: 7, Budget: 30000, Speed: 1.1, Clock: 1980, FullMHz: 1800}
	if l != want {
		t.Errorf("line %+v, want %+v", l, want)
	}

	bad := NewTraceWriter(failWriter{})
	for i := 0; i < 5000; i++ { // past the buffer: the write fails inside Trace
		bad.Trace(TraceEvent{At: at, GPU: "GPU-1", Event: EvClock})
	}
	if err := bad.Close(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Close after failed writes: %v", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
