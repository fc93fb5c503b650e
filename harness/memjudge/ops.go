package memjudge

import (
	"fmt"
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
		// memload's 2048 x 512 x 4-byte layers; CUDA takes a depth of 0 (under 4 MiB asked) for a
		// 2D array, one layer (seed 8314: a 2 MiB array3d judged as 0 bytes, the library's
		// refusal of its 4 MiB near the limit as wrong).
		d := max(bytes/(4*mib), 1)
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
	arg := func(i int) string {
		if i < len(a) {
			return a[i]
		}
		return ""
	}
	switch verb {
	case "init", "use":
		return r.execUse(p, verb, arg)
	case "alloc", "graph":
		return r.execAlloc(p, verb, arg)
	case "free":
		return r.execFree(p, arg)
	case "share-ipc", "share-vmm":
		return r.execShare(p, verb, arg)
	case "ctxcreate":
		return r.execCtxCreate(p, arg)
	case "reset":
		return r.execReset(p, arg)
	case "fork", "spawn":
		return r.execSpawn(p, verb, arg)
	case "kill":
		p.kill()
	case "exit":
		_, _ = p.do(r.ctx, "exit")
		p.stop()
	case "closecache":
		_, err := p.do(r.ctx, "closecache "+r.pod.cache)
		return outcome{unit: -1}, tolerate(err)
	case "exhaust", "unexhaust":
		_, err := p.do(r.ctx, verb)
		p.full = verb == "exhaust"
		return outcome{unit: -1}, tolerate(err)
	default: // the rest are memload's own: burst, sigalloc, sigfree, trim, closeall
		_, err := p.do(r.ctx, strings.TrimSpace(verb+" "+strings.Join(a, " ")))
		return outcome{unit: -1}, tolerate(err)
	}
	return outcome{unit: -1}, nil
}

// execUse: init and use make an ordinal current (memload answers with its unit).
func (r *run) execUse(p *proc, verb string, arg func(int) string) (outcome, error) {
	out := outcome{unit: -1}
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
	return out, nil
}

// execAlloc: an allocation of a kind, or a graph whose memory pool allocates, in the current context.
func (r *run) execAlloc(p *proc, verb string, arg func(int) string) (outcome, error) {
	out := outcome{unit: -1}
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
	return out, nil
}

// execFree frees an object; a created context takes what was made in it along.
func (r *run) execFree(p *proc, arg func(int) string) (outcome, error) {
	out := outcome{unit: -1}
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
	return out, nil
}

// execShare: another live process on the same unit opens p's object, by an IPC handle or a VMM export.
func (r *run) execShare(p *proc, verb string, arg func(int) string) (outcome, error) {
	out := outcome{unit: -1}
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
	return out, nil
}

// execCtxCreate creates a context on an ordinal, current from then on.
func (r *run) execCtxCreate(p *proc, arg func(int) string) (outcome, error) {
	out := outcome{unit: -1}
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
	return out, nil
}

// execReset resets an ordinal's primary context: what was made in it goes.
func (r *run) execReset(p *proc, arg func(int) string) (outcome, error) {
	out := outcome{unit: -1}
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
	return out, nil
}

// execSpawn: p forks or spawns a child, which joins the pod under the name the line gives.
func (r *run) execSpawn(p *proc, verb string, arg func(int) string) (outcome, error) {
	out := outcome{unit: -1}
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
