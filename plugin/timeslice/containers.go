package timeslice

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/limitbed/limitbed/plugin/schedproto"
)

// A container's part of the table: its grant file mapped, who it is (the Source), its seats on
// its GPUs' loops, and taking all of that down again. node.go keeps the table, loop.go drives the
// GPUs.

// ctr is one container's files.
type ctr struct {
	key    string
	id     Identity
	known  bool // identified: scheduled; else its entries stay Off
	logged bool // that it is not was logged
	grant  *schedproto.GrantFile
	report *schedproto.ReportFile
	// reportBad: something is in the report's place that is not a report (Observed.Blind); the
	// error was logged when it was first seen.
	reportBad bool
	on        map[schedproto.UUID]int // GPU -> its entry (the first entry of a GPU named twice)
}

func (n *Node) open(key string) *ctr {
	g, err := schedproto.OpenGrant(schedproto.GrantPath(n.GrantDir, key))
	if err != nil {
		n.Logger.Error(err, "Cannot map a grant file", "container", key)
		return nil
	}
	c := &ctr{key: key, grant: g, on: map[schedproto.UUID]int{}}
	for i, u := range g.GPUs() {
		if _, dup := c.on[u]; !dup {
			c.on[u] = i
		}
	}
	n.identify(c)
	return c
}

// identify asks the source who the container is; until it knows, the container is not scheduled.
func (n *Node) identify(c *ctr) {
	id, err := n.Source.Identify(c.key, c.grant.GPUs())
	switch {
	case errors.Is(err, ErrUnknown):
		if !c.logged {
			n.Logger.Error(err, "Container not scheduled: its library paces itself", "container", c.key)
			c.logged = true
			n.off(c, nil)
		}
		return
	case err != nil:
		n.Logger.Error(err, "Container scheduled at its strictest reading", "container", c.key)
	}
	c.id, c.known = id, true
	held := map[schedproto.UUID]bool{}
	for _, u := range id.GPUs {
		held[u] = true
	}
	for u := range c.on {
		if !held[u] {
			n.Logger.Error(nil, "GPU of the grant file not the container's: not scheduled", "container", c.key, "gpu", u)
			delete(c.on, u)
		}
	}
	n.off(c, c.on)
	c.grant.SetPeriod(n.Config.Period)
	n.Logger.Info("Scheduling container", "container", c.key, "gpus", len(c.on), "limit", id.Limit, "policy", id.Policy, "priority", id.Priority)
}

func (n *Node) reopenReport(c *ctr) {
	if c.report != nil && !c.report.Replaced() {
		return
	}
	if c.report != nil {
		n.withGPUs(c, func() { _ = c.report.Close(); c.report = nil })
	}
	r, err := schedproto.OpenReport(schedproto.ReportPath(n.ContainersDir, c.key))
	if err != nil {
		// Not created yet (no process launched, or the container removed it: its processes keep
		// theirs and wait for grants that say nothing to them: its own loss): nothing pending.
		// Anything else in its place: always busy, never absent (Observed.Blind).
		bad := !errors.Is(err, fs.ErrNotExist)
		if bad && !c.reportBad {
			n.Logger.Error(err, "Report unreadable: the container gets its slices, each charged whole", "container", c.key)
		}
		n.withGPUs(c, func() { c.reportBad = bad })
		return
	}
	n.withGPUs(c, func() { c.report, c.reportBad = r, false })
}

// withGPUs runs f while every loop of c's GPUs is stopped between steps.
func (n *Node) withGPUs(c *ctr, f func()) {
	var locked []*gpuLoop
	for u := range c.on {
		if l := n.gpus[u]; l != nil {
			l.mu.Lock()
			locked = append(locked, l)
		}
	}
	f()
	for _, l := range locked {
		l.mu.Unlock()
	}
}

// join seats a container on its GPUs, starting a loop for a GPU seen the first time.
func (n *Node) join(ctx context.Context, c *ctr) {
	if !c.known {
		return
	}
	for u, i := range c.on {
		l := n.gpus[u]
		if l == nil {
			l = &gpuLoop{g: NewGPU(u, n.Config, uint32(n.now().UnixNano()>>20)), members: map[string]*member{}}
			l.g.SetTracer(n.Tracer)
			n.gpus[u] = l
			n.wg.Add(1)
			go func() { defer n.wg.Done(); n.loop(ctx, l) }()
		}
		l.mu.Lock()
		l.g.Put(c.id)
		_, st := c.grant.Load(i) // what the file says now: a new file's Wait, or a predecessor's word
		l.members[c.key] = &member{c: c, idx: i, written: st}
		l.mu.Unlock()
	}
}

// off sets Off every entry of c's grant file but the driven ones (nil: all): a new grant file's
// entries start Wait, and the library of a container the node does not schedule on a GPU must
// pace itself there at once.
func (n *Node) off(c *ctr, driven map[schedproto.UUID]int) {
	for i := range c.grant.GPUs() {
		keep := false
		for _, j := range driven {
			keep = keep || j == i
		}
		if !keep {
			c.grant.Set(i, schedproto.Off, 0, 0)
		}
	}
}

// drop takes a container off its GPUs, sets its entries Off and unmaps its files.
func (n *Node) drop(c *ctr) {
	for u, i := range c.on {
		if l := n.gpus[u]; l != nil {
			l.mu.Lock()
			l.g.Remove(c.key)
			delete(l.members, c.key)
			l.mu.Unlock()
		}
		c.grant.Set(i, schedproto.Off, 0, 0)
	}
	_ = c.grant.Close()
	if c.report != nil {
		_ = c.report.Close()
	}
	delete(n.ctrs, c.key)
}

func (c *ctr) obsJoin(i int) string {
	if c.report == nil {
		return "no report"
	}
	e, err := c.report.Entry(i)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%+v want %d", e.Join, e.Want)
}
