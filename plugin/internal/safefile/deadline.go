package safefile

import (
	"fmt"
	"sync"
	"time"
)

// ReasonTimeout marks a file whose open or read ran past its deadline, or
// that an earlier call is still opening or reading.
const ReasonTimeout Reason = "timeout"

// Inflight bounds how long a node process waits on container-writable
// files: Run returns by its deadline whatever the file does, and a path
// whose earlier call has not returned is refused rather than opened again,
// so a stuck file costs one goroutine, not one per period. The zero value is
// ready; it is safe for concurrent use.
type Inflight struct {
	mu   sync.Mutex
	busy map[string]bool
}

// Result is one path's outcome of RunAll.
type Result[T any] struct {
	Value T
	Err   error
}

// RunAll runs f for every path concurrently and returns by timeout. A call
// still running then, or refused because an earlier one on the same path
// still runs, is an *Error with ReasonTimeout; when an abandoned call returns
// later its value is handed to release (nil: dropped), so nothing it holds
// leaks.
func RunAll[T any](in *Inflight, paths []string, timeout time.Duration, f func(path string) (T, error), release func(T)) map[string]Result[T] {
	type done struct {
		path string
		res  Result[T]
	}
	out := make(map[string]Result[T], len(paths))
	ch := make(chan done, len(paths))
	var mu sync.Mutex
	abandoned := false
	started := 0
	for _, p := range paths {
		if !in.start(p) {
			out[p] = Result[T]{Err: &Error{Path: p, Reason: ReasonTimeout, Err: fmt.Errorf("an earlier call on it has not returned")}}
			continue
		}
		started++
		go func(p string) {
			v, err := f(p)
			in.end(p)
			mu.Lock()
			defer mu.Unlock()
			if abandoned {
				if err == nil && release != nil {
					release(v)
				}
				return
			}
			ch <- done{p, Result[T]{v, err}} // buffered for every path: never blocks
		}(p)
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for started > 0 {
		select {
		case d := <-ch:
			out[d.path] = d.res
			started--
		case <-deadline.C:
			mu.Lock()
			abandoned = true
			// Calls that finished before the flag are in the channel; later ones release their value.
			for len(ch) > 0 {
				d := <-ch
				out[d.path] = d.res
			}
			mu.Unlock()
			for _, p := range paths {
				if _, ok := out[p]; !ok {
					out[p] = Result[T]{Err: &Error{Path: p, Reason: ReasonTimeout, Err: fmt.Errorf("still running at the %v deadline", timeout)}}
				}
			}
			return out
		}
	}
	return out
}

func (in *Inflight) start(path string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.busy == nil {
		in.busy = map[string]bool{}
	}
	if in.busy[path] {
		return false
	}
	in.busy[path] = true
	return true
}

func (in *Inflight) end(path string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.busy, path)
}
