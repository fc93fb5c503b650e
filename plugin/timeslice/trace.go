package timeslice

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// A trace says, slice by slice, what the scheduler decided and when: the grant, the holder's
// first launch, the revocation, the drain, and every reading of the GPU's clock with the speed a
// slice was charged at. It is how the scheduler's side of a shortfall is measured beside the
// GPU's own record of what ran (docs/plugin.md, "The trace"); nothing reads it back.

// Trace events.
const (
	EvGrant    = "grant"     // a slice is granted (budget: its credit then)
	EvJoin     = "join"      // the holder's first launch was seen: charged from here
	EvRevoke   = "revoke"    // its budget is spent: launches stop, its queue drains
	EvDrained  = "drained"   // the revoked slice's work drained (its processes said so)
	EvOverlap  = "overlap"   // the next slice starts beside an undrained one
	EvReleased = "released"  // the holder went idle and gave the GPU back
	EvUnjoined = "unjoined"  // the holder never launched: the slice ended
	EvClock    = "clock"     // a reading of the GPU's SM clock
	EvCalib    = "calibrate" // a calibration starts
	EvLearn    = "learned"   // the clock at full load was learned (full)
)

// TraceEvent is one line of a trace.
type TraceEvent struct {
	At        time.Time
	GPU       string
	Container string
	Event     string
	Slice     uint32
	Budget    time.Duration // the slice's budget in full-load time (grant)
	Spent     time.Duration // charged to the slice so far, in full-load time
	Speed     float64       // what a second of the GPU's time was charged then
	ClockMHz  float64       // the SM clock read (clock), or smoothed (others)
	FullMHz   float64       // the clock at full load, as learned (0: not known)
}

// Tracer receives a GPU's events. It is called with the GPU's loop lock held: it must not block.
type Tracer interface {
	Trace(TraceEvent)
}

// traceLine is TraceEvent as written: times in ns since the epoch (the clock the GPU's global
// timer follows), durations in µs.
type traceLine struct {
	T       int64   `json:"t"`
	GPU     string  `json:"gpu"`
	C       string  `json:"c,omitempty"`
	Ev      string  `json:"ev"`
	Slice   uint32  `json:"slice,omitempty"`
	Budget  int64   `json:"budget_us,omitempty"`
	Spent   int64   `json:"spent_us,omitempty"`
	Speed   float64 `json:"speed"`
	Clock   float64 `json:"clk,omitempty"`
	FullMHz float64 `json:"full,omitempty"`
}

// TraceWriter writes events as JSON lines, buffered; Close flushes. Safe for the GPUs' loops
// at once. A write error is kept and returned by Close: the schedule never waits on the trace.
type TraceWriter struct {
	mu  sync.Mutex
	w   *bufio.Writer
	c   io.Closer
	err error
}

// NewTraceWriter traces to w (closed by Close when it is an io.Closer).
func NewTraceWriter(w io.Writer) *TraceWriter {
	t := &TraceWriter{w: bufio.NewWriterSize(w, 1<<16)}
	if c, ok := w.(io.Closer); ok {
		t.c = c
	}
	return t
}

// Trace implements Tracer.
func (t *TraceWriter) Trace(e TraceEvent) {
	b, err := json.Marshal(traceLine{T: e.At.UnixNano(), GPU: e.GPU, C: e.Container, Ev: e.Event, Slice: e.Slice,
		Budget: e.Budget.Microseconds(), Spent: e.Spent.Microseconds(), Speed: e.Speed, Clock: e.ClockMHz, FullMHz: e.FullMHz})
	t.mu.Lock()
	defer t.mu.Unlock()
	if err == nil && t.err == nil {
		_, err = t.w.Write(append(b, '\n'))
	}
	if err != nil && t.err == nil {
		t.err = err
	}
}

// Close flushes the trace and closes its file.
func (t *TraceWriter) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.w.Flush()
	if t.c != nil {
		if cerr := t.c.Close(); err == nil {
			err = cerr
		}
	}
	if t.err != nil {
		return fmt.Errorf("trace: %w", t.err)
	}
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	return nil
}

// SetTracer makes the GPU report its events to t (nil: none).
func (g *GPU) SetTracer(t Tracer) { g.tracer = t }

// trace reports an event of s (nil: the GPU's own) at now.
func (g *GPU) trace(now time.Time, ev string, s *seat) {
	if g.tracer == nil {
		return
	}
	e := TraceEvent{At: now, GPU: g.UUID.String(), Event: ev, Speed: g.factor(), ClockMHz: g.speed.clk, FullMHz: g.speed.full}
	if s != nil {
		e.Container, e.Slice = s.id.Key, s.grant
		if s == g.holder {
			e.Budget, e.Spent = g.budget, g.spent
		}
	}
	g.tracer.Trace(e)
}
