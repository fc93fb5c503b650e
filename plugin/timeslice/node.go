package timeslice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/schedproto"
)

// GrantSuffix names a container's grant file in the grant directory: <key>.grant.
const GrantSuffix = ".grant"

// Heartbeat is how often every grant word's sequence is bumped. libvgpu.so takes a word that has
// not changed for 500 ms (LB_SCHED_DEAD_NS, docs/hamicore.md) for a scheduler that stopped.
const Heartbeat = 10 * time.Millisecond

// Node schedules every GPU of the node: it keeps the table of containers (their grant files,
// reports and identities) and runs one loop per GPU.
type Node struct {
	GrantDir      string // <HOOK_PATH>/vgpu/sched: <key>.grant, created by the device plugin
	ContainersDir string // <HOOK_PATH>/vgpu/containers: <key>/sched.report, written by the container
	Source        Source
	Config        Config
	Scan          time.Duration // how often the table is refreshed; 0: 200 ms
	Grace         time.Duration // a grant file whose container directory is gone this long is removed; 0: 1 min
	Logger        klog.Logger
	Now           func() time.Time
	// Clocks reads each GPU's SM clock, which slices are charged by (speed.go); nil: slices are
	// charged their time.
	Clocks Clocks
	// Tracer, when set, receives every GPU's slices and clock readings (trace.go).
	Tracer Tracer

	mu     sync.Mutex
	ctrs   map[string]*ctr
	gpus   map[schedproto.UUID]*gpuLoop
	orphan map[string]time.Time
	wg     sync.WaitGroup
}

// ctr is one container's files.
type ctr struct {
	key    string
	id     Identity
	known  bool // identified: scheduled; else its entries stay Off
	logged bool // that it is not was logged
	grant  *schedproto.GrantFile
	report *schedproto.ReportFile
	on     map[schedproto.UUID]int // GPU -> its entry (the first entry of a GPU named twice)
}

type member struct {
	c       *ctr
	idx     int
	written schedproto.State
	id      uint32
}

type gpuLoop struct {
	mu       sync.Mutex
	g        *GPU
	members  map[string]*member
	joined   uint32    // the last slice whose join was logged (-v=6)
	clockAt  time.Time // the SM clock was last read then
	clockErr bool      // the last reading failed (logged at the first of a run of failures)
}

// Clocks reads a GPU's SM clock in MHz.
type Clocks interface {
	SMClock(gpu string) (uint32, error) // gpu: NVML's form, "GPU-…"
}

// readClock gives the GPU a reading of its SM clock when one is due. A GPU whose clock cannot be
// read keeps its last speed.
func (n *Node) readClock(l *gpuLoop, now time.Time) {
	if n.Clocks == nil || now.Sub(l.clockAt) < n.Config.ClockEvery {
		return
	}
	l.clockAt = now
	mhz, err := n.Clocks.SMClock(l.g.UUID.String())
	if err != nil {
		if !l.clockErr {
			n.Logger.Error(err, "Cannot read the SM clock: slices are charged at the last speed", "gpu", l.g.UUID)
		}
		l.clockErr = true
		return
	}
	if l.clockErr {
		n.Logger.Info("Reading the SM clock again", "gpu", l.g.UUID, "mhz", mhz)
	}
	l.clockErr = false
	l.g.Clock(now, float64(mhz))
}

func (n *Node) now() time.Time {
	if n.Now != nil {
		return n.Now()
	}
	return time.Now()
}

// Run schedules until ctx ends; then every entry it drove is set Off (the libraries pace
// themselves at once rather than after the heartbeat's silence).
func (n *Node) Run(ctx context.Context) error {
	if err := os.MkdirAll(n.GrantDir, 0o755); err != nil {
		return err
	}
	n.ctrs, n.gpus, n.orphan = map[string]*ctr{}, map[schedproto.UUID]*gpuLoop{}, map[string]time.Time{}
	scan := n.Scan
	if scan <= 0 {
		scan = 200 * time.Millisecond
	}
	t := time.NewTicker(scan)
	defer t.Stop()
	for {
		n.refresh(ctx)
		select {
		case <-ctx.Done():
			n.wg.Wait()
			n.mu.Lock()
			for _, c := range n.ctrs {
				n.drop(c)
			}
			n.mu.Unlock()
			return nil
		case <-t.C:
		}
	}
}

// refresh brings the table up to date with the grant directory.
func (n *Node) refresh(ctx context.Context) {
	ents, err := os.ReadDir(n.GrantDir)
	if err != nil {
		n.Logger.Error(err, "Cannot list the grant files")
		return
	}
	seen := map[string]bool{}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, de := range ents {
		key, ok := strings.CutSuffix(de.Name(), GrantSuffix)
		if !ok || key == "" || strings.HasPrefix(key, ".") || !de.Type().IsRegular() {
			continue
		}
		seen[key] = true
		if n.collect(key) {
			continue
		}
		c := n.ctrs[key]
		if c != nil && c.grant.Replaced() {
			n.Logger.V(2).Info("Grant file replaced", "container", key)
			n.drop(c)
			c = nil
		}
		if c == nil {
			if c = n.open(key); c == nil {
				continue
			}
			n.ctrs[key] = c
			n.join(ctx, c)
		} else if !c.known {
			n.identify(c)
			n.join(ctx, c)
		}
		n.reopenReport(c)
	}
	for key, c := range n.ctrs {
		if !seen[key] {
			n.drop(c)
		}
	}
}

// collect removes a grant file whose container directory has been gone for Grace (the node
// monitor removes a dead pod's directory); it reports whether the key is gone.
func (n *Node) collect(key string) bool {
	if _, err := os.Lstat(filepath.Join(n.ContainersDir, key)); err == nil || !errors.Is(err, os.ErrNotExist) {
		delete(n.orphan, key)
		return false
	}
	grace := n.Grace
	if grace <= 0 {
		grace = time.Minute
	}
	since, ok := n.orphan[key]
	if !ok {
		n.orphan[key] = n.now()
		return false
	}
	if n.now().Sub(since) < grace {
		return false
	}
	if c := n.ctrs[key]; c != nil {
		n.drop(c)
	}
	delete(n.orphan, key)
	if err := os.Remove(filepath.Join(n.GrantDir, key+GrantSuffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
		n.Logger.Error(err, "Cannot remove a dead container's grant file", "container", key)
	} else {
		n.Logger.V(2).Info("Removed a dead container's grant file", "container", key)
	}
	return true
}

func (n *Node) open(key string) *ctr {
	g, err := schedproto.OpenGrant(filepath.Join(n.GrantDir, key+GrantSuffix))
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
	r, err := schedproto.OpenReport(filepath.Join(n.ContainersDir, c.key, schedproto.ReportName))
	if err != nil {
		return // not created yet (no process launched), or not a report: nothing is pending
	}
	n.withGPUs(c, func() { c.report = r })
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

// bellGap is the least time between two waits on a draining container's bell: the container can
// ring it at will, which must not make the loop spin.
const bellGap = 200 * time.Microsecond

// loop runs one GPU: observe the reports, step, write the grants that changed, beat; then sleep
// until the GPU's next step, on the holder's bell while a slice is held or drains.
func (n *Node) loop(ctx context.Context, l *gpuLoop) {
	var beat time.Time
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	sleep := func(d time.Duration) {
		timer.Reset(d)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
	}
	var woke time.Time // the holder's bell woke the loop then (see below)
	for ctx.Err() == nil {
		l.mu.Lock()
		now := n.now()
		if !woke.IsZero() {
			// What the ring announced (a first launch, a drain) happened by the time the loop
			// woke; the step after bellGap is as of then, so a slice is charged from the wake on
			// its first launch, not from a timer's late return (a loaded node's timers overshoot
			// by a millisecond, a few per cent of a slice, all of it uncharged).
			now, woke = woke, time.Time{}
		}
		next, seen := n.step(l, now, &beat)
		bell := n.bell(l, seen)
		l.mu.Unlock()
		at := n.now() // now may be a wake's, earlier: the sleep is timed from the clock
		d := min(next.Sub(at), beat.Add(Heartbeat).Sub(at))
		if d <= 0 {
			continue
		}
		if bell != nil {
			t0 := time.Now()
			if bell(d) {
				woke = n.now()
			}
			if w := time.Since(t0); w < bellGap && w < d {
				sleep(min(bellGap, d) - w)
			}
			continue
		}
		sleep(d)
	}
}

// step observes every member's report, steps the GPU, writes the grants that changed and beats
// (l.mu held). It returns when the GPU wants its next step and what each report said.
func (n *Node) step(l *gpuLoop, now time.Time, beat *time.Time) (time.Time, map[string]Observed) {
	seen := make(map[string]Observed, len(l.members))
	for key, m := range l.members {
		var o Observed
		if m.c.report != nil {
			e, err := m.c.report.Entry(m.idx)
			o = Observed{Entry: e, OK: err == nil}
		}
		l.g.Observe(key, o, now)
		seen[key] = o
	}
	n.readClock(l, now)
	next := l.g.Step(now)
	for key, m := range l.members {
		st, id, budget := l.g.Grant(key)
		if st != m.written || ((st == schedproto.Run || st == schedproto.Free) && id != m.id) {
			m.c.grant.Set(m.idx, st, id, budget)
			m.written, m.id = st, id
			n.Logger.V(5).Info("Grant", "gpu", l.g.UUID, "container", key, "state", st, "slice", id, "budget", budget)
		}
	}
	if now.Sub(*beat) >= Heartbeat {
		for _, m := range l.members {
			m.c.grant.Beat(m.idx)
		}
		*beat = now
	}
	if key, g, since, ok := l.g.Holder(); ok && n.Logger.V(6).Enabled() {
		if m := l.members[key]; m != nil && m.c.report != nil {
			if e, err := m.c.report.Entry(m.idx); err == nil && e.Join.Grant == g && g != l.joined {
				l.joined = g
				n.Logger.V(6).Info("Joined", "container", key, "after", now.Sub(since))
			}
		}
	}
	return next, seen
}

// bell is the wait on the bell the loop sleeps on (l.mu held), nil for none. The holder's bell
// rings at its first launch (its slice is charged from then) and when its work drained (revoked,
// or idle: the GPU can go to the next one at once); a revoked slice that drains beside the
// holder's rings when its drain ends (Overlapping).
func (n *Node) bell(l *gpuLoop, seen map[string]Observed) func(time.Duration) bool {
	if key, ok := l.g.Draining(); ok && n.Logger.V(6).Enabled() {
		if m := l.members[key]; m != nil {
			n.Logger.V(6).Info("Draining", "container", key, "join", m.c.obsJoin(m.idx))
		}
	}
	key, ok := l.g.Draining()
	if !ok {
		key, ok = l.g.Overlapping()
	}
	if !ok {
		key, _, _, ok = l.g.Holder()
	}
	if !ok {
		return nil
	}
	m := l.members[key]
	if m == nil || m.c.report == nil || !seen[key].OK {
		return nil
	}
	r, idx, old := m.c.report, m.idx, seen[key].Bell
	// The bell as observed before the step: a ring since (a launcher that joined as its grant
	// was written) wakes the wait at once.
	return func(d time.Duration) bool {
		_ = r.WaitBell(idx, old, d)
		e, err := r.Entry(idx)
		return err == nil && e.Bell != old
	}
}

// GPUReport is one GPU's figures and its containers'.
type GPUReport struct {
	GPU   GPUStats
	Seats map[string]SeatStats
	// Speed is the GPU's speed against full load that slices are charged by; ClockMHz and
	// FullLoadMHz the SM clocks it is judged from (0: not known).
	Speed, ClockMHz, FullLoadMHz float64
}

// Stats returns every GPU's figures.
func (n *Node) Stats() map[schedproto.UUID]GPUReport {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[schedproto.UUID]GPUReport{}
	for u, l := range n.gpus {
		l.mu.Lock()
		g, s := l.g.Stats()
		f, clk, full := l.g.Speed()
		l.mu.Unlock()
		out[u] = GPUReport{GPU: g, Seats: s, Speed: f, ClockMHz: clk, FullLoadMHz: full}
	}
	return out
}
