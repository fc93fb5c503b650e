package timeslice

import (
	"slices"
	"time"

	"github.com/limitbed/limitbed/plugin/schedproto"
)

// Observed is one container's report entry for a GPU, as read in one step.
type Observed struct {
	schedproto.Entry
	OK bool // the report could be read; if not, nothing in it changed
	// Blind: the container's report is there but cannot be read as one (not a regular file of a
	// report's size, a symlink, a fault on reading it). What a container writes must never take
	// it out of the slices (its processes obey their grant whatever happened to the report): it
	// is read as always busy, gets its slices, each charged whole, and no more.
	Blind bool
}

// mode is how the scheduler treats a container on a GPU, decided every step.
type mode int

const (
	modeFree    mode = iota // launches freely: never held (disable, no limit)
	modeLimited             // slices worth its limit
	modeShared              // unthrottled, but takes turns with limited neighbours (gets what they leave)
)

type phase int

const (
	phaseNone     phase = iota
	phaseGranted        // the holder's slice runs
	phaseDraining       // revoked; its work still runs
)

type seat struct {
	id       Identity
	mode     mode
	credit   time.Duration // GPU time it may still use; negative after an overrun
	bonus    time.Duration // overlap charges given back (below): spent before credit
	state    schedproto.State
	grant    uint32 // the slice id of the last Run or Free
	obs      schedproto.Entry
	wantAt   time.Time // the want word last changed
	activeAt time.Time // the active word last changed, or it launched or waited
	waitFrom time.Time // owed a slice (pending, credit > 0) and waiting since; zero when not
	lastRun  time.Time // its last slice started (round robin of unthrottled containers)
	revoked  time.Time // its last slice was revoked (draining, overlapping)
	seated   time.Time // first seen by a step
	// While its revoked slice drains beside others' slices: what they were charged for the
	// overlap beyond their half, given back when the drain is reported complete.
	lent       map[*seat]time.Duration
	drain      time.Duration // how long its drains took (smoothed): its slices end that much early
	calibrated bool          // a calibration saw it busy (speed.go)
	blind      bool          // its report cannot be read: always busy, charged whole (Observed.Blind)
	summed     bool          // limited and busy: its limit is in the step's sum (limitSum)
	stats      SeatStats
}

// SeatStats are one container's figures on one GPU (metrics, tests).
type SeatStats struct {
	Used    time.Duration // GPU time charged (slices up to their drain, overlaps halved)
	Slices  int
	MaxWait time.Duration // the longest wait of the container for a slice it was owed
}

// GPU schedules one physical GPU.
type GPU struct {
	UUID   schedproto.UUID
	cfg    Config
	seats  []*seat // by key
	holder *seat
	phase  phase
	start  time.Time     // the holder's slice started
	budget time.Duration // the holder's credit when it started: the slice's length, drain included
	spent  time.Duration // charged to the holder since
	from   time.Time     // the holder is charged from then: its first launch, at most JoinGrace after start
	over   []*seat       // revoked slices still draining beside the next one
	nextID uint32
	last   time.Time
	speed  speedModel
	stats  GPUStats
	tracer Tracer
}

// GPUStats are a GPU's figures.
type GPUStats struct {
	Switches int           // slices granted
	Overlaps int           // slices that started before the last one drained
	Idle     time.Duration // no slice granted or draining while a container was owed one
	// Calibrations: times the GPU was filled to learn its clock at full load (speed.go).
	Calibrations int
}

// Speed is the GPU's speed against full load that slices are charged by, and the SM clocks it
// is judged from (0: not known).
func (g *GPU) Speed() (factor, clockMHz, fullLoadMHz float64) {
	return g.factor(), g.speed.clk, g.speed.full
}

// NewGPU returns the scheduler of one GPU. idSeed starts its slice ids (a restarted scheduler must
// not reuse the ids of slices its predecessor granted).
func NewGPU(uuid schedproto.UUID, cfg Config, idSeed uint32) *GPU {
	return &GPU{UUID: uuid, cfg: cfg, nextID: idSeed}
}

func (g *GPU) find(key string) *seat {
	i, ok := slices.BinarySearchFunc(g.seats, key, func(s *seat, k string) int {
		switch {
		case s.id.Key < k:
			return -1
		case s.id.Key > k:
			return 1
		}
		return 0
	})
	if !ok {
		return nil
	}
	return g.seats[i]
}

// Put adds a container or updates its identity.
func (g *GPU) Put(id Identity) {
	if s := g.find(id.Key); s != nil {
		s.id = id
		return
	}
	g.seats = append(g.seats, &seat{id: id, state: schedproto.Wait})
	slices.SortFunc(g.seats, func(a, b *seat) int {
		if a.id.Key < b.id.Key {
			return -1
		}
		if a.id.Key > b.id.Key {
			return 1
		}
		return 0
	})
}

// Remove drops a container (it is gone); a slice it held ends.
func (g *GPU) Remove(key string) {
	s := g.find(key)
	if s == nil {
		return
	}
	if g.holder == s {
		g.holder, g.phase = nil, phaseNone
	}
	g.over = slices.DeleteFunc(g.over, func(o *seat) bool { return o == s })
	g.seats = slices.DeleteFunc(g.seats, func(o *seat) bool { return o == s })
}

// Keys are the containers on the GPU.
func (g *GPU) Keys() []string {
	out := make([]string, len(g.seats))
	for i, s := range g.seats {
		out[i] = s.id.Key
	}
	return out
}

// Observe records what a container's report said at now.
func (g *GPU) Observe(key string, o Observed, now time.Time) {
	s := g.find(key)
	if s == nil {
		return
	}
	if !o.OK {
		s.blind = o.Blind
		return
	}
	s.blind = false
	if o.Want != s.obs.Want {
		s.wantAt, s.activeAt = now, now
	}
	if o.Active != s.obs.Active {
		s.activeAt = now
	}
	s.obs = o.Entry
}

// Grant is what the GPU decided for a container: the state of its grant word and, for Run and
// Free, the slice id and how long the slice is planned to last before it is revoked (0: until
// further notice), which the library sizes its queue by.
func (g *GPU) Grant(key string) (schedproto.State, uint32, time.Duration) {
	s := g.find(key)
	if s == nil {
		return schedproto.Off, 0, 0
	}
	var d time.Duration
	if s == g.holder && s.mode == modeLimited {
		d = max(g.wall(g.budget)-s.drain, time.Microsecond) // planned to end at once: not "no end"
	}
	return s.state, s.grant, d
}

// Holder names the container holding the GPU, the slice and when it started.
func (g *GPU) Holder() (key string, grant uint32, since time.Time, ok bool) {
	if g.holder == nil || g.phase != phaseGranted {
		return "", 0, time.Time{}, false
	}
	return g.holder.id.Key, g.holder.grant, g.start, true
}

// Draining names the container whose revoked slice the next one waits for, if any: the node
// loop sleeps on its report's bell instead of a tick.
func (g *GPU) Draining() (string, bool) {
	if g.holder != nil && g.phase == phaseDraining {
		return g.holder.id.Key, true
	}
	return "", false
}

// Overlapping names a container whose revoked slice still drains beside the holder's, once the
// holder has launched: the node loop sleeps on its bell then, so the half of the overlap given
// back to the holder (account) ends when the drain does, not at the next tick (the holder's slice
// end is timed; its own ring would only say it went idle early).
func (g *GPU) Overlapping() (string, bool) {
	h := g.holder
	if h == nil || g.phase != phaseGranted || h.obs.Join.Grant != h.grant || len(g.over) == 0 {
		return "", false
	}
	return g.over[0].id.Key, true
}

// Stats returns the GPU's and each container's figures.
func (g *GPU) Stats() (GPUStats, map[string]SeatStats) {
	m := make(map[string]SeatStats, len(g.seats))
	for _, s := range g.seats {
		m[s.id.Key] = s.stats
	}
	return g.stats, m
}

// ResetStats zeroes the figures (a test's warm-up, a metrics window).
func (g *GPU) ResetStats() {
	g.stats = GPUStats{}
	for _, s := range g.seats {
		s.stats = SeatStats{}
	}
}

func (g *GPU) pending(s *seat, now time.Time) bool {
	return s.blind || (!s.wantAt.IsZero() && now.Sub(s.wantAt) < g.cfg.PendingHold)
}

func (g *GPU) running(s *seat) bool {
	return s.blind || (s.obs.Join.Grant == s.grant && !s.drained(s.grant))
}

// drained reports whether nothing of the container runs under slice id: every process that joined
// it drained, or those that did not are dead (the kernel dropped their live locks: a process that
// dies under its slice never reports its drain, and its work died with it).
func (s *seat) drained(id uint32) bool {
	return s.obs.Join.Drained(id) || s.obs.Gone(id)
}

func (g *GPU) busy(s *seat, now time.Time) bool {
	return (!s.activeAt.IsZero() && now.Sub(s.activeAt) < g.cfg.ActiveHold) || g.pending(s, now) ||
		((s.state == schedproto.Run || s.state == schedproto.Free) && g.running(s))
}

// share is a limited container's fraction of the GPU's full-load work: its limit over den (the
// GPU's 100, or the busy limited containers' sum of limits when it is more, or while the GPU
// calibrates: denominator).
func share(s *seat, den int) float64 {
	if den < 100 && !s.summed {
		den = 100 // a calibration fills the GPU with the busy ones' slices, not with the others'
	}
	return float64(s.id.Limit) / float64(den)
}

func (g *GPU) quantum(s *seat, den int) time.Duration {
	return time.Duration(share(s, den) * float64(g.cfg.Period))
}

// BlindDrain is the drain of a container whose report cannot be read: the most work libvgpu.so
// leaves queued when its slice ends (markers.h, LB_MK_QUEUE_MIN_NS). Its slices end that much
// early, as any container's end by its measured drain.
const BlindDrain = 4 * time.Millisecond

// WarmUp is how long a container is on a GPU before its waits count (MaxWait): until its first
// drains are measured, its slices do not end early by them, and the first slices of containers
// that start together queue behind each other (as the limit is specified after 2 s).
const WarmUp = 2 * time.Second

// Step advances the GPU to now: charges and credits the time since the last step, decides every
// container's mode, ends, drains and starts slices. It returns when it wants the next step.
func (g *GPU) Step(now time.Time) time.Time {
	if g.last.IsZero() {
		g.last = now
	}
	dt := max(now.Sub(g.last), 0)
	g.last = now
	for _, s := range g.seats {
		if s.seated.IsZero() {
			s.seated = now
		}
	}

	den := g.decideModes(now)
	if h := g.holder; h != nil && g.phase == phaseGranted && (h.obs.Join.Grant == h.grant || h.blind) && now.Before(g.from) {
		g.from = now // its first launch: charged from here
		g.trace(now, EvJoin, h)
	}
	g.account(dt, den, now)
	g.judgeHolder(now, den)
	g.judgeOverlaps(now)
	if g.holder == nil {
		g.pick(now, den)
	}
	g.settle(now, den)
	return g.next(now)
}

// decideModes sets every container's mode from the policies and who is busy, and starts a
// calibration if one is due; it returns what the limits are shares of (denominator).
func (g *GPU) decideModes(now time.Time) int {
	busy := make([]bool, len(g.seats))
	for i, s := range g.seats {
		busy[i] = g.busy(s, now)
	}
	modes := make([]mode, len(g.seats))
	for i, s := range g.seats {
		if s.id.neverHeld() {
			continue
		}
		peer := false // a busy container of the same or a higher priority
		for j, o := range g.seats {
			peer = peer || (j != i && busy[j] && o.id.Priority <= s.id.Priority)
		}
		// Unthrottled default containers still take turns (alone, the turn never ends): so a
		// neighbour that starts gets the GPU within a drain of a short queue, not of the up to a
		// second of work an ungated launcher queues.
		modes[i] = modeShared
		if s.id.Policy == PolicyForce || peer {
			modes[i] = modeLimited
		}
	}
	var fresh []*seat
	for i, s := range g.seats {
		m := modes[i]
		if m != modeFree && s.state == schedproto.Free && s != g.holder && g.running(s) {
			// It ran freely and now takes turns: what it queued meanwhile drains beside the
			// next slice, charged to it.
			s.revoked = now
			g.over = append(g.over, s)
		}
		if m == modeLimited && s.mode != modeLimited {
			fresh = append(fresh, s)
		}
		if m != modeLimited {
			s.credit, s.bonus = 0, 0
		}
		s.mode = m
	}
	sum := g.limitSum(now)
	g.maybeCalibrate(now, sum)
	den := g.denominator(sum, now)
	for _, s := range fresh {
		s.credit = g.quantum(s, den) // a container that starts taking turns may take one slice at once
	}
	return den
}

func (g *GPU) limitSum(now time.Time) int {
	sum := 0
	for _, s := range g.seats {
		s.summed = s.mode == modeLimited && g.busy(s, now)
		if s.summed {
			sum += s.id.Limit
		}
	}
	return sum
}

// judgeHolder ends or drains the running slice.
func (g *GPU) judgeHolder(now time.Time, den int) {
	h := g.holder
	if h == nil {
		return
	}
	j := h.obs.Join
	if g.phase == phaseGranted {
		end := false
		switch h.mode {
		case modeLimited:
			// The slice is the credit it started with (what it earns meanwhile is for its next
			// one), less what its drain will take; but not before its first launch (a slice
			// shorter than its drain, as of a kernel longer than a slice, would otherwise end
			// before a launcher slower to wake than a step could use it).
			end = g.spent >= g.budget-g.work(h.drain) && (j.Grant == h.grant || h.blind)

		case modeShared:
			end = g.readyLimited(now, den, h) != nil || (now.Sub(g.start) >= g.cfg.Period && g.pickShared(now, h) != nil)
		case modeFree:
			g.holder, g.phase = nil, phaseNone // nobody to take turns with any more: it runs free
			return
		}
		released := !h.blind && j.Grant == h.grant && j.Joins > 0 && h.drained(h.grant) && !g.pending(h, now) // idle: its work drained
		unjoined := !h.blind && j.Grant != h.grant && now.Sub(g.start) >= g.cfg.JoinTimeout
		switch {
		case released || unjoined:
			g.trace(now, map[bool]string{true: EvReleased, false: EvUnjoined}[released], h)
			h.state = schedproto.Wait
			g.holder, g.phase = nil, phaseNone
			return
		case end:
			h.state, h.revoked = schedproto.Wait, now
			g.phase = phaseDraining
			g.trace(now, EvRevoke, h)
		}
	}
	if g.phase == phaseDraining {
		switch {
		case (!h.blind && h.drained(h.grant)) || (h.blind && now.Sub(h.revoked) >= BlindDrain):
			// A blind one's drain is not reported: it is taken to be the longest the library
			// leaves queued at a slice's end, charged to it.
			g.trace(now, EvDrained, h)
			h.drain += (now.Sub(h.revoked) - h.drain) / 4
			g.holder, g.phase = nil, phaseNone
		case now.Sub(h.revoked) >= g.cfg.DrainWait && g.anyOwed(now, den, h):
			g.trace(now, EvOverlap, h)
			g.over = append(g.over, h) // the next slice starts beside its drain
			g.stats.Overlaps++
			g.holder, g.phase = nil, phaseNone
		}
	}
}

// settle gives every container not holding the GPU its state: free ones launch freely, the
// others wait; and keeps the waits owed.
func (g *GPU) settle(now time.Time, den int) {
	for _, s := range g.seats {
		switch {
		case s.mode == modeFree:
			if s.state != schedproto.Free {
				g.nextID++
				if g.nextID == 0 {
					g.nextID = 1
				}
				s.state, s.grant = schedproto.Free, g.nextID
			}
		case s != g.holder || g.phase != phaseGranted:
			s.state = schedproto.Wait
		}
		switch {
		case s == g.holder || !g.owed(s, now, den):
			s.waitFrom = time.Time{}
		case s.waitFrom.IsZero():
			s.waitFrom = now
		}
	}
}

// next is when the GPU wants its next step: when the holder's credit runs out, or a tick.
func (g *GPU) next(now time.Time) time.Time {
	t := now.Add(g.cfg.Tick)
	if h := g.holder; h != nil && g.phase == phaseGranted && h.mode == modeLimited {
		n := 1 + len(g.over)
		if end := maxTime(now, g.from).Add(g.wall(g.budget-g.work(h.drain)-g.spent) * time.Duration(n)); end.Before(t) {
			t = end
		}
	}
	if !t.After(now) {
		t = now.Add(time.Microsecond)
	}
	return t
}
