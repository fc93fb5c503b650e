package memjudge

import (
	"fmt"
	"sort"
)

// The random sequence: each step picked from the pod's state, with the weights below.

var (
	allocKinds = []string{"mem", "mem", "mem", "mem1", "managed", "pitch", "pitch1", "array", "array1", "array3d",
		"array3d1", "mipmap", "async", "async", "pool", "pool", "vmm", "vmmx", "vmmx", "module", "heap", "stack"}
	sizesMiB = []uint64{2, 8, 32, 64, 128, 256, 384, 512, 768, 1024, 1280, 1536, 2048}
)

func (r *run) live() []*proc {
	var ps []*proc
	for _, p := range r.procs {
		if p.alive {
			ps = append(ps, p)
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].idx < ps[j].idx })
	return ps
}

func (r *run) nextIdx() int {
	n := 0
	for i := range r.procs {
		n = max(n, i+1)
	}
	return n
}

func pickObj(p *proc, rngInt func(int) int, want func(*object) bool) int {
	var ids []int
	for id, o := range p.objs {
		if want(o) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return -1
	}
	sort.Ints(ids)
	return ids[rngInt(len(ids))]
}

// generate picks the next step from the pod's state.
func (r *run) generate() string {
	live := r.live()
	if len(live) == 0 {
		return r.startLine(r.nextIdx())
	}
	p := live[r.rng.Intn(len(live))]
	g := &gen{r: r, p: p, live: live, vis: r.specs[p.idx].visible()}
	if p.cur < 0 {
		return fmt.Sprintf("p%d init %d", p.idx, r.rng.Intn(g.vis))
	}
	line := ""
	if w := r.rng.Intn(100); w < 75 {
		line = g.memory(w)
	} else {
		line = g.process(w)
	}
	if line != "" {
		return line
	}
	return fmt.Sprintf("p%d alloc %d mem %d", p.idx, g.newID(), g.size())
}

// gen picks one step for process p: the weights w of generate's roll, below 75 the memory's
// steps, from 75 on the contexts', the processes' and the library's. "" falls back to an alloc.
type gen struct {
	r    *run
	p    *proc
	live []*proc
	vis  int // the ordinals p sees
}

func (g *gen) newID() int   { g.p.nextObj++; return g.p.nextObj }
func (g *gen) size() uint64 { return sizesMiB[g.r.rng.Intn(len(sizesMiB))] * mib }
func (g *gen) hasKind(k string) bool {
	for _, o := range g.p.objs {
		if o.kind == k && o.ctx == g.p.curCtx && o.ordinal == g.p.cur {
			return true
		}
	}
	return false
}

func (g *gen) memory(w int) string {
	r, p, live, vis := g.r, g.p, g.live, g.vis
	switch {
	case w < 34:
		k := allocKinds[r.rng.Intn(len(allocKinds))]
		if (k == "heap" || k == "stack") && g.hasKind(k) {
			k = "mem"
		}
		b := g.size()
		if k == "mipmap" {
			b = (b/(10*mib) + 1) * 10 * mib
		}
		return fmt.Sprintf("p%d alloc %d %s %d", p.idx, g.newID(), k, b)
	case w < 58:
		if id := pickObj(p, r.rng.Intn, func(o *object) bool { return o.kind != "ctx" }); id >= 0 {
			return fmt.Sprintf("p%d free %d", p.idx, id)
		}
	case w < 62:
		n := []int{1, 3, 9, 1030}[r.rng.Intn(4)]
		each := []uint64{2, 4, 32, 128}[r.rng.Intn(4)] * mib
		if n == 1030 {
			each = 2 * mib
		}
		return fmt.Sprintf("p%d graph %d %d %d %d", p.idx, g.newID(), n, uint64(n)*each, r.rng.Intn(2))
	case w < 66, w < 70:
		kind := map[bool]string{true: "share-ipc", false: "share-vmm"}[w < 66]
		want := map[bool]string{true: "mem", false: "vmmx"}[w < 66]
		id := pickObj(p, r.rng.Intn, func(o *object) bool { return o.kind == want })
		if id < 0 || len(live) < 2 {
			break
		}
		q := live[r.rng.Intn(len(live))]
		if q == p {
			break
		}
		q.nextObj++
		return fmt.Sprintf("p%d %s %d p%d %d", p.idx, kind, id, q.idx, q.nextObj)
	case w < 75:
		return fmt.Sprintf("p%d use %d", p.idx, r.rng.Intn(vis))
	}
	return ""
}

func (g *gen) process(w int) string {
	r, p, live, vis := g.r, g.p, g.live, g.vis
	switch {
	case w < 77:
		return fmt.Sprintf("p%d ctxcreate %d %d", p.idx, g.newID(), r.rng.Intn(vis))
	case w < 79:
		if id := pickObj(p, r.rng.Intn, func(o *object) bool { return o.kind == "ctx" }); id >= 0 {
			return fmt.Sprintf("p%d free %d", p.idx, id)
		}
	case w < 80:
		return fmt.Sprintf("p%d reset %d", p.idx, r.rng.Intn(vis))
	case w < 82:
		return fmt.Sprintf("p%d trim", p.idx)
	case w < 84:
		return fmt.Sprintf("p%d burst %d %d %d", p.idx, 2+r.rng.Intn(6), 20+r.rng.Intn(80), g.size())
	case w < 85:
		line := fmt.Sprintf("p%d sigalloc %d %d", p.idx, g.size(), 1+r.rng.Intn(3))
		// A signal every 200-500 µs: it lands in the library's own work too. Not faster: a handler
		// that calls cuMemAlloc costs tens of µs even refused (signal delivery, the refusal's log
		// line), and a timer faster than its own handler leaves the program no time between
		// handlers: seed 8402's 50 µs never let its cuMemAlloc return, with this library or any
		// (without one, every handler's allocation sleeps fakegpu's 30 ms in the driver). That is
		// the program's own livelock, not a charge the judge can check; 100 µs ran in 0.5 s.
		if r.rng.Intn(2) == 0 {
			line += fmt.Sprintf(" %d", 200+r.rng.Intn(301))
		}
		return line
	case w < 86:
		return fmt.Sprintf("p%d sigfree", p.idx)
	case w < 88:
		if len(live) < 7 {
			verb := map[bool]string{true: "fork", false: "spawn"}[r.rng.Intn(2) == 0]
			return fmt.Sprintf("p%d %s p%d", p.idx, verb, r.nextIdx())
		}
	case w < 90:
		if len(live) > 2 {
			return fmt.Sprintf("p%d %s", p.idx, map[bool]string{true: "kill", false: "exit"}[r.rng.Intn(2) == 0])
		}
		if len(live) < 7 {
			return r.startLine(r.nextIdx())
		}
	case w < 93:
		return fmt.Sprintf("p%d closecache", p.idx)
	case w < 95:
		return fmt.Sprintf("p%d closeall", p.idx)
	case w < 97:
		return fmt.Sprintf("p%d exhaust", p.idx)
	default:
		return fmt.Sprintf("p%d unexhaust", p.idx)
	}
	return ""
}
