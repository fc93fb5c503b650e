package memjudge

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// A sequence is lines "pN verb args...": the verbs are memload's commands (memload/) plus the
// judge's own: start, share-ipc, share-vmm, kill, fork and spawn (which name the new process).

// outcome is what the judge needs from one executed step.
type outcome struct {
	refusedOOM bool   // an allocation refused with CUDA_ERROR_OUT_OF_MEMORY
	unit       int    // on which GPU (-1: none)
	bytes      uint64 // of how much
}

const cudaErrorOutOfMemory = 2

func isAlloc(verb string) bool {
	switch verb {
	case "alloc", "graph", "share-ipc", "share-vmm", "ctxcreate":
		return true
	}
	return false
}

func (r *run) startLine(i int) string {
	specs := []procSpec{{how: "exec"}, {how: "exec", cvd: "1,0"}, {how: "exec", cvd: "1", order: "PCI_BUS_ID"},
		{how: "login", order: "PCI_BUS_ID"}, {how: "login", cvd: "1,0"}, {how: "exec", order: "PCI_BUS_ID"}}
	s := specs[i%len(specs)]
	if s.how == "login" && !r.cfg.Login {
		s.how = "exec"
	}
	return fmt.Sprintf("p%d start %s", i, s)
}

func (r *run) start(idx int, args []string) error {
	if len(args) < 1 {
		return fmt.Errorf("start: no kind")
	}
	s := procSpec{how: args[0]}
	for _, a := range args[1:] {
		switch {
		case strings.HasPrefix(a, "cvd="):
			s.cvd = strings.TrimPrefix(a, "cvd=")
		case strings.HasPrefix(a, "order="):
			s.order = strings.TrimPrefix(a, "order=")
		}
	}
	if s.how == "login" && !r.cfg.Login {
		s.how = "exec"
	}
	p, err := r.pod.start(r.ctx, idx, s)
	if err != nil {
		return err
	}
	r.procs[idx], r.specs[idx] = p, s
	r.stats.Procs++
	return nil
}

// visible: how many CUDA devices a process of the spec sees.
func (s procSpec) visible() int {
	if s.cvd == "" {
		return 2
	}
	return len(strings.Split(s.cvd, ","))
}

func (r *run) unitOf(uuid string) (int, error) {
	t, err := r.truth()
	if err != nil {
		return -1, err
	}
	u := t.UnitOf(uuid)
	if u < 0 {
		return -1, fmt.Errorf("device %s is none of the fake host's %v", uuid, t.Units)
	}
	return u, nil
}

func atoi(s string) int {
	v, _ := strconv.Atoi(s)
	return v
}

func atou(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}

// sizes of each kind: what the library charges and what the driver holds (granule rounding).
func sizes(kind string, bytes uint64, unit int) (lib, truth uint64) {
	round := func(b uint64) uint64 { return (b + granule - 1) / granule * granule }
	switch kind {
	case "array3d", "array3d1":
		d := bytes / (4 * mib)
		return d * 4 * mib, d * 4 * mib
	case "mipmap":
		h := bytes * 4 / 5 / 8192
		h1 := max(h/2, 1)
		raw := 2048*h*4 + 1024*h1*4
		return raw, round(raw)
	case "stack":
		threads := uint64(10*2048) * uint64(unit+1) // the judge's profile: 10 and 20 SMs
		b := bytes / threads * threads
		return b, b
	case "module", "heap":
		return bytes, bytes
	}
	return bytes, round(bytes)
}

func (r *run) exec(p *proc, verb string, a []string) (outcome, error) {
	out := outcome{unit: -1}
	arg := func(i int) string {
		if i < len(a) {
			return a[i]
		}
		return ""
	}
	switch verb {
	case "init", "use":
		rep, err := p.do(r.ctx, verb+" "+arg(0))
		if err != nil || !rep.ok || len(rep.fields) < 1 {
			return out, tolerate(err)
		}
		u, err := r.unitOf(rep.fields[0])
		if err != nil {
			return out, err
		}
		d := atoi(arg(0))
		p.units[d], p.cur, p.curCtx = u, d, -1
	case "alloc", "graph":
		if p.cur < 0 {
			return out, nil
		}
		id, u := atoi(arg(0)), p.units[p.cur]
		var cmd, kind string
		var bytes uint64
		if verb == "alloc" {
			kind, bytes = arg(1), atou(arg(2))
			cmd = fmt.Sprintf("alloc %d %s %d", id, kind, bytes)
		} else {
			kind, bytes = "graph", atou(arg(2))
			cmd = fmt.Sprintf("graph %d %s %d %s", id, arg(1), bytes, arg(3))
		}
		lib, truth := sizes(kind, bytes, u)
		if kind == "graph" {
			lib, truth = 0, 0 // the graph memory pool's reserve is the driver's; judged by the unit's total
		}
		rep, err := p.do(r.ctx, cmd)
		if err != nil {
			return out, tolerate(err)
		}
		r.stats.Allocs++
		if rep.ok {
			r.stats.Granted++
			p.objs[id] = &object{kind: kind, unit: u, bytes: lib, truth: truth, ctx: p.curCtx, ordinal: p.cur}
		} else if rep.code == cudaErrorOutOfMemory {
			r.stats.Refused++
			out = outcome{refusedOOM: true, unit: u, bytes: max(lib, bytes)}
		}
	case "free":
		id := atoi(arg(0))
		o := p.objs[id]
		rep, err := p.do(r.ctx, "free "+arg(0))
		if err != nil {
			return out, tolerate(err)
		}
		if rep.ok && o != nil {
			delete(p.objs, id)
			if o.kind == "ctx" {
				p.dropCtx(id)
				// What was below it is current now (memload says which).
				p.cur, p.curCtx = -1, -1
				if len(rep.fields) >= 3 {
					u, err := r.unitOf(rep.fields[1])
					if err != nil {
						return out, err
					}
					p.cur, p.curCtx = atoi(rep.fields[0]), atoi(rep.fields[2])
					p.units[p.cur] = u
				}
			}
		}
	case "share-ipc", "share-vmm":
		id, q, nid := atoi(arg(0)), r.procs[atoi(strings.TrimPrefix(arg(1), "p"))], atoi(arg(2))
		o := p.objs[id]
		if o == nil || q == nil || !q.alive || q.cur < 0 || q.units[q.cur] != o.unit || q == p {
			return out, nil
		}
		var cmd string
		if verb == "share-ipc" {
			rep, err := p.do(r.ctx, fmt.Sprintf("ipcget %d", id))
			if err != nil || !rep.ok || len(rep.fields) < 1 {
				return out, tolerate(err)
			}
			cmd = fmt.Sprintf("ipcopen %d %s", nid, rep.fields[0])
		} else {
			rep, err := p.do(r.ctx, fmt.Sprintf("vmmexport %d", id))
			if err != nil || !rep.ok || len(rep.fields) < 2 {
				return out, tolerate(err)
			}
			cmd = fmt.Sprintf("vmmimport %d %s %s %d", nid, rep.fields[0], rep.fields[1], o.bytes)
		}
		rep, err := q.do(r.ctx, cmd)
		if err != nil {
			return out, tolerate(err)
		}
		r.stats.Allocs++
		if rep.ok {
			r.stats.Granted++
			kind := "ipc"
			if verb == "share-vmm" {
				kind = "import"
			}
			q.objs[nid] = &object{kind: kind, unit: o.unit, bytes: o.bytes, truth: o.bytes, ctx: q.curCtx, ordinal: q.cur}
		} else if rep.code == cudaErrorOutOfMemory {
			r.stats.Refused++
			out = outcome{refusedOOM: true, unit: o.unit, bytes: o.bytes}
		}
	case "ctxcreate":
		id, d := atoi(arg(0)), atoi(arg(1))
		rep, err := p.do(r.ctx, fmt.Sprintf("ctxcreate %d %d", id, d))
		if err != nil {
			return out, tolerate(err)
		}
		if rep.ok && len(rep.fields) > 0 {
			u, err := r.unitOf(rep.fields[0])
			if err != nil {
				return out, err
			}
			p.units[d], p.cur, p.curCtx = u, d, id
			p.objs[id] = &object{kind: "ctx", unit: u, ctx: id, ordinal: d}
		} else if rep.code == cudaErrorOutOfMemory {
			if u, ok := p.units[d]; ok {
				out = outcome{refusedOOM: true, unit: u, bytes: ContextCharge}
			}
		}
	case "reset":
		d := atoi(arg(0))
		rep, err := p.do(r.ctx, "reset "+arg(0))
		if err != nil {
			return out, tolerate(err)
		}
		if rep.ok && len(rep.fields) > 0 {
			for id, o := range p.objs {
				if o.ctx == -1 && o.ordinal == d && !o.survivesCtx() {
					delete(p.objs, id)
				}
			}
			u, err := r.unitOf(rep.fields[0])
			if err != nil {
				return out, err
			}
			p.cur, p.curCtx, p.units[d] = d, -1, u
		}
	case "fork", "spawn":
		child := atoi(strings.TrimPrefix(arg(0), "p"))
		rep, err := p.do(r.ctx, verb+" "+r.pod.sock)
		if err != nil || !rep.ok || len(rep.fields) < 1 {
			return out, tolerate(err)
		}
		c, err := r.pod.accept(r.ctx, child, verb, atoi(rep.fields[0]))
		if err != nil {
			return out, err
		}
		if verb == "fork" && p.full {
			c.pins = p
		}
		r.procs[child], r.specs[child] = c, procSpec{how: verb, cvd: r.specs[p.idx].cvd, order: r.specs[p.idx].order}
		r.stats.Procs++
	case "kill":
		p.kill()
	case "exit":
		_, _ = p.do(r.ctx, "exit")
		p.stop()
	case "closecache":
		_, err := p.do(r.ctx, "closecache "+r.pod.cache)
		return out, tolerate(err)
	case "exhaust", "unexhaust":
		_, err := p.do(r.ctx, verb)
		p.full = verb == "exhaust"
		return out, tolerate(err)
	default: // the rest are memload's own: burst, sigalloc, sigfree, trim, closeall
		_, err := p.do(r.ctx, strings.TrimSpace(verb+" "+strings.Join(a, " ")))
		return out, tolerate(err)
	}
	return out, nil
}

// tolerate: a process that is gone ends its part of the sequence, nothing more.
func tolerate(err error) error {
	if err == errGone {
		return nil
	}
	return err
}

func (o *object) survivesCtx() bool {
	return o.kind == "vmm" || o.kind == "vmmx" || o.kind == "import" || o.kind == "ctx"
}

// dropCtx: the created context id is destroyed, and what was made in it with it.
func (p *proc) dropCtx(id int) {
	for oid, o := range p.objs {
		if o.ctx == id && !o.survivesCtx() {
			delete(p.objs, oid)
		}
	}
	if p.curCtx == id {
		p.curCtx = -1
	}
}

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
	vis := r.specs[p.idx].visible()
	if p.cur < 0 {
		return fmt.Sprintf("p%d init %d", p.idx, r.rng.Intn(vis))
	}
	newID := func() int { p.nextObj++; return p.nextObj }
	size := func() uint64 { return sizesMiB[r.rng.Intn(len(sizesMiB))] * mib }
	hasKind := func(k string) bool {
		for _, o := range p.objs {
			if o.kind == k && o.ctx == p.curCtx && o.ordinal == p.cur {
				return true
			}
		}
		return false
	}
	switch w := r.rng.Intn(100); {
	case w < 34:
		k := allocKinds[r.rng.Intn(len(allocKinds))]
		if (k == "heap" || k == "stack") && hasKind(k) {
			k = "mem"
		}
		b := size()
		if k == "mipmap" {
			b = (b/(10*mib) + 1) * 10 * mib
		}
		return fmt.Sprintf("p%d alloc %d %s %d", p.idx, newID(), k, b)
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
		return fmt.Sprintf("p%d graph %d %d %d %d", p.idx, newID(), n, uint64(n)*each, r.rng.Intn(2))
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
	case w < 77:
		return fmt.Sprintf("p%d ctxcreate %d %d", p.idx, newID(), r.rng.Intn(vis))
	case w < 79:
		if id := pickObj(p, r.rng.Intn, func(o *object) bool { return o.kind == "ctx" }); id >= 0 {
			return fmt.Sprintf("p%d free %d", p.idx, id)
		}
	case w < 80:
		return fmt.Sprintf("p%d reset %d", p.idx, r.rng.Intn(vis))
	case w < 82:
		return fmt.Sprintf("p%d trim", p.idx)
	case w < 84:
		return fmt.Sprintf("p%d burst %d %d %d", p.idx, 2+r.rng.Intn(6), 20+r.rng.Intn(80), size())
	case w < 85:
		line := fmt.Sprintf("p%d sigalloc %d %d", p.idx, size(), 1+r.rng.Intn(3))
		if r.rng.Intn(2) == 0 { // a signal every 50-500 µs: it lands in the library's own work too
			line += fmt.Sprintf(" %d", 50+r.rng.Intn(451))
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
	return fmt.Sprintf("p%d alloc %d mem %d", p.idx, newID(), size())
}
