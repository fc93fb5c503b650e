// Package memjudge holds libvgpu.so's memory limits to the driver's own record of what every
// process holds: several processes of one pod (exec'd and login sessions, forked with and
// without exec, killed, closing and exhausting their descriptors, with threads and signal
// handlers that allocate, on two GPUs in permuted CUDA orders) run a random sequence over every
// allocation path the driver has; after every step the fake driver's per-process record
// (fgtruth) must show
//
//  1. never over: what the pod holds on each GPU, less the context allowance (one context per
//     process and GPU) and the driver's rounding, is within that GPU's limit;
//  2. never falsely refused: an allocation refused with CUDA_ERROR_OUT_OF_MEMORY would not have
//     fit by the driver's record plus the library's documented over-counts (memory another
//     process of the pod imported counts once per holder; a second context is charged
//     ContextCharge).
//
// A run is seeded; a failure reports the seed and the sequence, shrunk, which Replay runs again.
// The C half is harness/memjudge/memload (docs/hamicore.md, "The memory judge").
package memjudge

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

const (
	mib = uint64(1) << 20
	// ContextMiB is the fake GPU's context cost (the profile's context_mib): the allowance each
	// process has on each GPU it holds a context on.
	ContextMiB = 300
	// ContextCharge is what libvgpu.so charges for every context beyond a process's first on a
	// GPU (hamicore/src/ctxcount.h, LB_CTX_CHARGE).
	ContextCharge = uint64(1) << 30
	granule       = 2 * mib // fakegpu's allocation granularity
)

// Config describes a run.
type Config struct {
	Paths  Paths
	Limits []uint64 // bytes per GPU, by the limits file's index (NVML's order)
	Login  bool     // some processes start as login sessions (needs root: a private mount namespace)
	Procs  int      // processes at the start
	Steps  int      // steps of a generated sequence
	Dir    string   // scratch directory
	Logf   func(format string, args ...any)
	Trace  bool // log every step with the driver's and the library's figures (to read a replay)
}

// Failure is a property that did not hold.
type Failure struct {
	Seed     int64
	Step     int
	Property string // "over" or "refused"
	Detail   string
	Lines    []string // the sequence up to the failing step
	Dir      string   // the pod directory: every process's log (removed with the run's scratch directory)
}

func (f *Failure) Error() string {
	return fmt.Sprintf("memjudge seed %d, step %d: %s: %s", f.Seed, f.Step, f.Property, f.Detail)
}

// Stats counts what a run did.
type Stats struct {
	Steps, Procs, Allocs, Granted, Refused, Checks int
}

// run is one execution of a sequence against a fresh pod.
type run struct {
	cfg   Config
	pod   *pod
	procs map[int]*proc
	specs map[int]procSpec
	rng   *rand.Rand
	lines []string
	stats Stats
	seed  int64
	ctx   context.Context
}

func newRun(ctx context.Context, cfg Config, seed int64, dir string) (*run, error) {
	p, err := newPod(cfg, dir)
	if err != nil {
		return nil, err
	}
	return &run{cfg: cfg, pod: p, procs: map[int]*proc{}, specs: map[int]procSpec{},
		rng: rand.New(rand.NewSource(seed)), seed: seed, ctx: ctx}, nil
}

func (r *run) close() {
	ids := make([]int, 0, len(r.procs))
	for i := range r.procs {
		ids = append(ids, i)
	}
	sort.Ints(ids)
	for _, i := range ids {
		r.procs[i].kill()
	}
	r.pod.close()
}

// RunError is a run that could not go on (a process that stopped answering, a tool that failed):
// not a property failure, but reported with the sequence that led to it.
type RunError struct {
	Seed  int64
	Lines []string
	Dir   string // the pod directory: every process's log
	Err   error
}

func (e *RunError) Error() string {
	return fmt.Sprintf("memjudge seed %d, step %d: %v (process logs in %s)", e.Seed, len(e.Lines), e.Err, e.Dir)
}

func (e *RunError) Unwrap() error { return e.Err }

// Generate runs a random sequence of cfg.Steps steps from seed and checks both properties after
// every step. It returns the first failure (with the sequence so far), or nil.
func Generate(ctx context.Context, cfg Config, seed int64) (*Failure, Stats, error) {
	r, err := newRun(ctx, cfg, seed, filepath.Join(cfg.Dir, fmt.Sprintf("seed-%d", seed)))
	if err != nil {
		return nil, Stats{}, err
	}
	defer r.close()
	wrap := func(f *Failure, err error) (*Failure, Stats, error) {
		if err != nil {
			err = &RunError{Seed: seed, Lines: append([]string{}, r.lines...), Dir: r.pod.dir, Err: err}
		}
		return f, r.stats, err
	}
	for i := 0; i < cfg.Procs; i++ {
		if f, err := r.step(r.startLine(i)); f != nil || err != nil {
			return wrap(f, err)
		}
	}
	for s := 0; s < cfg.Steps; s++ {
		line := r.generate()
		if line == "" {
			continue
		}
		if f, err := r.step(line); f != nil || err != nil {
			return wrap(f, err)
		}
	}
	return nil, r.stats, nil
}

// Replay runs the given lines (a recorded or shrunk sequence) against a fresh pod.
func Replay(ctx context.Context, cfg Config, seed int64, lines []string) (*Failure, Stats, error) {
	r, err := newRun(ctx, cfg, seed, filepath.Join(cfg.Dir, fmt.Sprintf("replay-%d-%d", seed, time.Now().UnixNano())))
	if err != nil {
		return nil, Stats{}, err
	}
	defer r.close()
	for _, l := range lines {
		if f, err := r.step(l); f != nil || err != nil {
			return f, r.stats, err
		}
	}
	return nil, r.stats, nil
}

// Shrink removes steps from a failing sequence as long as the same property still fails, within
// budget; it returns the shortest failing sequence found.
func Shrink(ctx context.Context, cfg Config, f *Failure, budget time.Duration) *Failure {
	best := f
	deadline := time.Now().Add(budget)
	for chunk := len(best.Lines) / 2; chunk >= 1 && time.Now().Before(deadline); chunk /= 2 {
		for start := 0; start < len(best.Lines) && time.Now().Before(deadline); {
			try := append(append([]string{}, best.Lines[:start]...), best.Lines[min(start+chunk, len(best.Lines)):]...)
			g, _, err := Replay(ctx, cfg, f.Seed, try)
			if err == nil && g != nil && g.Property == f.Property {
				best = g
				best.Seed = f.Seed
				continue // the same start again: the next chunk moved here
			}
			start += chunk
		}
	}
	return best
}

func (r *run) logf(format string, args ...any) {
	if r.cfg.Logf != nil {
		r.cfg.Logf(format, args...)
	}
}

// step executes one line and checks the properties.
func (r *run) step(line string) (*Failure, error) {
	r.lines = append(r.lines, line)
	r.stats.Steps++
	f := strings.Fields(line)
	if len(f) < 2 || f[0][0] != 'p' {
		return nil, fmt.Errorf("sequence line %q: want \"pN verb ...\"", line)
	}
	idx, err := strconv.Atoi(f[0][1:])
	if err != nil {
		return nil, fmt.Errorf("sequence line %q: bad process %q", line, f[0])
	}
	if f[1] == "start" {
		return nil, r.start(idx, f[2:])
	}
	p := r.procs[idx]
	if p == nil || !p.alive {
		return nil, nil // its process was never started or is gone (a shrunk sequence)
	}
	var before Truth
	alloc := isAlloc(f[1])
	if alloc {
		if before, err = r.truth(); err != nil {
			return nil, err
		}
	}
	res, err := r.exec(p, f[1], f[2:])
	if err != nil {
		return nil, fmt.Errorf("step %d %q: %w", len(r.lines), line, err)
	}
	after, err := r.truth()
	if err != nil {
		return nil, err
	}
	r.stats.Checks++
	if r.cfg.Trace {
		r.trace(line, res, after)
	}
	if msg := r.checkOver(after); msg != "" {
		return r.fail("over", msg), nil
	}
	// A process with no descriptor to spare may be refused by the driver itself (fakegpu cannot
	// reach its state then; a real driver its device files): not the library's refusal.
	if alloc && res.refusedOOM && res.unit >= 0 && !p.full {
		if msg := r.checkRefusal(before, p, res.unit, res.bytes); msg != "" {
			return r.fail("refused", msg), nil
		}
	}
	return nil, nil
}

func (r *run) trace(line string, res outcome, t Truth) {
	var b strings.Builder
	fmt.Fprintf(&b, "%-40s", line)
	if res.refusedOOM {
		fmt.Fprintf(&b, " REFUSED(%d MiB on %d)", res.bytes/mib, res.unit)
	}
	for u := range t.Units {
		fmt.Fprintf(&b, " | GPU%d driver %d MiB (-%d ctx)", u, t.Units[u].Used/mib, r.allowance(t, u)/mib)
	}
	if out, err := exec.Command(filepath.Join(r.cfg.Paths.Bin, "regiondump"), r.pod.cache).Output(); err == nil {
		var reg struct {
			Devices []struct {
				Index int    `json:"index"`
				Used  uint64 `json:"used_bytes"`
			} `json:"devices"`
		}
		if json.Unmarshal(out, &reg) == nil {
			for _, d := range reg.Devices {
				fmt.Fprintf(&b, " | lib%d %d MiB", d.Index, d.Used/mib)
			}
		}
	}
	r.logf("%s", b.String())
}

func (r *run) fail(prop, detail string) *Failure {
	return &Failure{Seed: r.seed, Step: len(r.lines), Property: prop, Detail: detail,
		Lines: append([]string{}, r.lines...), Dir: r.pod.dir}
}

func (r *run) truth() (Truth, error) {
	return ReadTruth(r.ctx, filepath.Join(r.cfg.Paths.Bin, "fgtruth"), r.pod.hostEnv())
}

// The properties. A process the judge does not know (none, in a fresh host) would count too.
func (r *run) allowance(t Truth, u int) uint64 {
	var a uint64
	for _, p := range t.Procs {
		a += min(p.Ctx[u], ContextMiB*mib)
	}
	return a
}

// rounding: what the driver holds beyond what the library charges for the live objects.
func (r *run) rounding(u int) uint64 {
	var s uint64
	for _, p := range r.procs {
		if !p.alive {
			continue
		}
		for _, o := range p.objs {
			if o.unit == u && o.truth > o.bytes {
				s += o.truth - o.bytes
			}
		}
	}
	return s
}

func (r *run) checkOver(t Truth) string {
	for u, lim := range r.cfg.Limits {
		if u >= len(t.Units) {
			break
		}
		used, a, rd := t.Units[u].Used, r.allowance(t, u), r.rounding(u)
		if used > lim+a+rd {
			return fmt.Sprintf("GPU %d (%s): the pod holds %d MiB by the driver's record, over its %d MiB limit "+
				"+ %d MiB context allowance + %d MiB rounding\n%s", u, t.Units[u].UUID, used/mib, lim/mib, a/mib, rd/mib,
				r.holdings(t, u))
		}
	}
	return ""
}

// checkRefusal: an allocation of bytes on unit u was refused for lack of memory.
func (r *run) checkRefusal(t Truth, p *proc, u int, bytes uint64) string {
	if u >= len(r.cfg.Limits) || u >= len(t.Units) {
		return ""
	}
	used, a, rd := t.Units[u].Used, r.allowance(t, u), r.rounding(u)
	var double, extra uint64
	for _, s := range t.Shared {
		if s.Unit == u && len(s.Holders) > 1 {
			double += s.Bytes * uint64(len(s.Holders)-1)
		}
	}
	for _, tp := range t.Procs {
		if n := tp.Ctx[u] / (ContextMiB * mib); n > 1 {
			extra += (n - 1) * (ContextCharge - ContextMiB*mib)
		}
	}
	pinned := r.pinned(u)
	charged := used - min(used, a+rd) + double + extra + pinned
	if lim := r.cfg.Limits[u]; charged+bytes <= lim {
		return fmt.Sprintf("%s (pid %d): %d MiB refused on GPU %d although the pod holds %d MiB by the driver's record "+
			"(%d MiB context allowance, %d MiB rounding, %d MiB imported twice, %d MiB of extra contexts, %d MiB of dead "+
			"parents a child forked with a full descriptor table keeps alive): %d MiB of %d MiB\n%s",
			p.name(), p.pid, bytes/mib, u, used/mib, a/mib, rd/mib, double/mib, extra/mib, pinned/mib, (charged+bytes)/mib,
			lim/mib, r.holdings(t, u))
	}
	return ""
}

// pinned: what the library may still count for dead processes whose slot lock a live child
// shares (forked while the parent's descriptor table was full: proc.pins), at most what the
// parent was charged when it died.
func (r *run) pinned(u int) uint64 {
	var s uint64
	seen := map[*proc]bool{}
	for _, c := range r.procs {
		p := c.pins
		if !c.alive || p == nil || p.alive || seen[p] {
			continue
		}
		seen[p] = true
		for _, o := range p.objs {
			if o.unit != u {
				continue
			}
			if o.kind == "ctx" {
				s += ContextCharge
			} else {
				s += o.bytes
			}
		}
	}
	return s
}

func (r *run) holdings(t Truth, u int) string {
	var b strings.Builder
	names := map[int]string{}
	for _, p := range r.procs {
		names[p.pid] = p.name() + " " + r.specs[p.idx].String()
	}
	for _, p := range t.Procs {
		fmt.Fprintf(&b, "  pid %d (%s): %d MiB allocated, %d MiB contexts\n", p.Pid, names[p.Pid], p.Used[u]/mib, p.Ctx[u]/mib)
	}
	for _, s := range t.Shared {
		if s.Unit == u {
			fmt.Fprintf(&b, "  shared %s allocation of %d MiB held by %v\n", s.Kind, s.Bytes/mib, s.Holders)
		}
	}
	return b.String()
}
