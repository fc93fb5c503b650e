package timeslice

import (
	"slices"
	"time"

	"github.com/limitbed/limitbed/plugin/schedproto"
)

// Config are the scheduler's timings (docs/plugin.md, "vgpu-scheduler").
type Config struct {
	// Period: the containers that want a GPU get slices in proportion to their limits over a
	// period, and one that is owed time gets its slice within a period.
	Period time.Duration
	// Tick: how often the GPU is judged again when nothing else wakes the node loop (new pending
	// work, an unthrottled holder to make way); the holder's launches and drains ring its bell,
	// and a slice's end is timed.
	Tick time.Duration
	// DrainWait: how long the next slice waits for the last one's work to drain before it starts
	// anyway (a kernel longer than that overlaps it; both are charged half of the overlap).
	DrainWait time.Duration
	// JoinTimeout: a slice none of whose processes started launching in this long ends.
	JoinTimeout time.Duration
	// JoinGrace: a slice is charged from its first launch (its processes report it, ringing
	// the bell), at most this long after it was granted: a container is not charged the time
	// its launchers take to wake, and one that delays its launches holds the GPU uncharged for
	// no longer than this.
	JoinGrace time.Duration
	// PendingHold: a container has pending work while its report's want changed this recently
	// (a waiting launcher bumps it every 10 ms).
	PendingHold time.Duration
	// ActiveHold: a container is busy, for its neighbours' `default` policy, this long after it
	// last launched or waited.
	ActiveHold time.Duration
	// OverlapMax: the longest a drain is waited for (and charged) past its slice.
	OverlapMax time.Duration
}

// DefaultConfig is the daemon's default.
func DefaultConfig() Config {
	return Config{
		Period:      100 * time.Millisecond,
		Tick:        5 * time.Millisecond,
		DrainWait:   10 * time.Millisecond,
		JoinTimeout: 50 * time.Millisecond,
		JoinGrace:   2 * time.Millisecond,
		PendingHold: 50 * time.Millisecond,
		ActiveHold:  500 * time.Millisecond,
		OverlapMax:  10 * time.Second,
	}
}

// Observed is one container's report entry for a GPU, as read in one step.
type Observed struct {
	schedproto.Entry
	OK bool // the report could be read; if not, nothing in it changed
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
	lent  map[*seat]time.Duration
	drain time.Duration // how long its drains took (smoothed): its slices end that much early
	stats SeatStats
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
	stats  GPUStats
}

// GPUStats are a GPU's figures.
type GPUStats struct {
	Switches int           // slices granted
	Overlaps int           // slices that started before the last one drained
	Idle     time.Duration // no slice granted or draining while a container was owed one
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
	if s == nil || !o.OK {
		return
	}
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
		d = max(g.budget-s.drain, time.Microsecond) // planned to end at once: not "no end"
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
	return !s.wantAt.IsZero() && now.Sub(s.wantAt) < g.cfg.PendingHold
}

func (g *GPU) running(s *seat) bool {
	return s.obs.Join.Grant == s.grant && s.obs.Join.Joins != s.obs.Join.Drains
}

func (g *GPU) busy(s *seat, now time.Time) bool {
	return (!s.activeAt.IsZero() && now.Sub(s.activeAt) < g.cfg.ActiveHold) || g.pending(s, now) ||
		((s.state == schedproto.Run || s.state == schedproto.Free) && g.running(s))
}

// share is a limited container's fraction of the GPU: its limit, scaled down when the limits of
// the busy limited containers sum to more than the GPU.
func share(s *seat, sum int) float64 {
	f := float64(s.id.Limit) / 100
	if sum > 100 {
		f = f * 100 / float64(sum)
	}
	return f
}

func (g *GPU) quantum(s *seat, sum int) time.Duration {
	return time.Duration(share(s, sum) * float64(g.cfg.Period))
}

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

	sum := g.decideModes(now)
	if h := g.holder; h != nil && g.phase == phaseGranted && h.obs.Join.Grant == h.grant && now.Before(g.from) {
		g.from = now // its first launch: charged from here
	}
	g.account(dt, sum, now)
	g.judgeHolder(now, sum)
	g.judgeOverlaps(now)
	if g.holder == nil {
		g.pick(now, sum)
	}
	g.settle(now, sum)
	return g.next(now)
}

// decideModes sets every container's mode from the policies and who is busy; it returns the sum
// of the busy limited containers' limits.
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
	for _, s := range fresh {
		s.credit = g.quantum(s, sum) // a container that starts taking turns may take one slice at once
	}
	return sum
}

func (g *GPU) limitSum(now time.Time) int {
	sum := 0
	for _, s := range g.seats {
		if s.mode == modeLimited && g.busy(s, now) {
			sum += s.id.Limit
		}
	}
	return sum
}

// account charges the slices that ran over dt and credits every limited container its share of
// dt, up to one period's worth (an idle container does not save up more).
//
// A revoked slice whose work still runs beside the next one (a kernel longer than DrainWait) is
// charged half of the overlap, as a GPU that time-slices the two gives it half. The next slice is
// charged all of it until that drain is reported complete, and then gets half back: a container
// that never reports its drain (or lies about running) makes its neighbour pay the whole overlap
// (never more than its limit), not gives it free time.
func (g *GPU) account(dt time.Duration, sum int, now time.Time) {
	n := time.Duration(len(g.over))
	if g.holder != nil {
		n++
	}
	for _, o := range g.over {
		g.charge(o, dt/n)
		if h := g.holder; h != nil {
			if o.lent == nil {
				o.lent = map[*seat]time.Duration{}
			}
			o.lent[h] += (dt - dt/n) / time.Duration(len(g.over))
		}
	}
	if h := g.holder; h != nil {
		c := dt
		if g.phase == phaseGranted {
			c = max(now.Sub(maxTime(now.Add(-dt), g.from)), 0)
		}
		g.charge(h, c)
		g.spent += c
	}
	owed := false
	for _, s := range g.seats {
		if s.mode != modeLimited {
			continue
		}
		// Credit stops growing at a quantum while the container has nothing to do, and at two
		// while it waits for its turn (a wait behind others' slices is made up by a longer slice,
		// not lost; a container that only claims to wait saves no more). The holder's grows
		// freely: it is being charged.
		limit := g.quantum(s, sum)
		switch {
		case s == g.holder:
			limit = time.Duration(1 << 62)
		case g.pending(s, now):
			limit = limit * 3 / 2
		}
		if s.credit < limit {
			s.credit = min(s.credit+time.Duration(share(s, sum)*float64(dt)), limit)
		}
		owed = owed || (s != g.holder && g.ready(s, now, sum))
	}
	if n == 0 && owed {
		g.stats.Idle += dt
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (g *GPU) charge(s *seat, d time.Duration) {
	s.stats.Used += d
	if s.mode != modeLimited {
		return
	}
	b := min(s.bonus, d)
	s.bonus -= b
	s.credit -= d - b
}

// judgeHolder ends or drains the running slice.
func (g *GPU) judgeHolder(now time.Time, sum int) {
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
			end = g.spent >= g.budget-h.drain && j.Grant == h.grant

		case modeShared:
			end = g.readyLimited(now, sum, h) != nil || (now.Sub(g.start) >= g.cfg.Period && g.pickShared(now, h) != nil)
		case modeFree:
			g.holder, g.phase = nil, phaseNone // nobody to take turns with any more: it runs free
			return
		}
		released := j.Grant == h.grant && j.Joins > 0 && j.Joins == j.Drains && !g.pending(h, now) // idle: its work drained
		unjoined := j.Grant != h.grant && now.Sub(g.start) >= g.cfg.JoinTimeout
		switch {
		case released || unjoined:
			h.state = schedproto.Wait
			g.holder, g.phase = nil, phaseNone
			return
		case end:
			h.state, h.revoked = schedproto.Wait, now
			g.phase = phaseDraining
		}
	}
	if g.phase == phaseDraining {
		switch {
		case j.Drained(h.grant):
			h.drain += (now.Sub(h.revoked) - h.drain) / 4
			g.holder, g.phase = nil, phaseNone
		case now.Sub(h.revoked) >= g.cfg.DrainWait && g.anyOwed(now, sum, h):
			g.over = append(g.over, h) // the next slice starts beside its drain
			g.stats.Overlaps++
			g.holder, g.phase = nil, phaseNone
		}
	}
}

func (g *GPU) judgeOverlaps(now time.Time) {
	g.over = slices.DeleteFunc(g.over, func(s *seat) bool {
		drained := s.obs.Join.Drained(s.grant)
		if !drained && now.Sub(s.revoked) < g.cfg.OverlapMax && s != g.holder {
			return false
		}
		for v, d := range s.lent {
			if drained && v.mode == modeLimited {
				v.bonus += d
				v.stats.Used -= d
			}
		}
		s.lent = nil
		return true
	})
}

// ready reports a limited container that is owed the GPU: pending work and a full quantum of
// credit (one period's share: it took no more than its share over the last period).
func (g *GPU) ready(s *seat, now time.Time, sum int) bool {
	return s.mode == modeLimited && g.pending(s, now) && s.credit+s.bonus >= g.quantum(s, sum)-time.Microsecond
}

// owed reports a container that may take the GPU next: a ready limited one, or an unthrottled
// one with pending work.
func (g *GPU) owed(s *seat, now time.Time, sum int) bool {
	return g.ready(s, now, sum) || (s.mode == modeShared && g.pending(s, now))
}

// readyLimited is the limited container to run next (not except): the highest priority, then the
// longest owed; but one that has waited so long that its slice would end more than a period after
// it was owed goes first, whatever its priority (no starvation).
func (g *GPU) readyLimited(now time.Time, sum int, except *seat) *seat {
	var best, urgent *seat
	for _, s := range g.seats {
		if s == except || !g.ready(s, now, sum) {
			continue
		}
		if !s.waitFrom.IsZero() && now.Sub(s.waitFrom) >= g.cfg.Period-g.quantum(s, sum)-g.cfg.Tick &&
			(urgent == nil || s.waitFrom.Before(urgent.waitFrom)) {
			urgent = s
		}
		if best == nil || s.id.Priority < best.id.Priority ||
			(s.id.Priority == best.id.Priority && since(s, now).Before(since(best, now))) {
			best = s
		}
	}
	if urgent != nil {
		return urgent
	}
	return best
}

// since is when s started waiting for its turn; now if it only just did.
func since(s *seat, now time.Time) time.Time {
	if s.waitFrom.IsZero() {
		return now
	}
	return s.waitFrom
}

// pickShared is the unthrottled container to run next (not except): the highest priority, then
// the one that ran longest ago.
func (g *GPU) pickShared(now time.Time, except *seat) *seat {
	var best *seat
	for _, s := range g.seats {
		if s == except || s.mode != modeShared || !g.pending(s, now) {
			continue
		}
		if best == nil || s.id.Priority < best.id.Priority ||
			(s.id.Priority == best.id.Priority && s.lastRun.Before(best.lastRun)) {
			best = s
		}
	}
	return best
}

func (g *GPU) anyOwed(now time.Time, sum int, except *seat) bool {
	return g.readyLimited(now, sum, except) != nil || g.pickShared(now, except) != nil
}

func (g *GPU) pick(now time.Time, sum int) {
	s := g.readyLimited(now, sum, nil)
	if s == nil {
		s = g.pickShared(now, nil)
	}
	if s == nil {
		return
	}
	g.nextID++
	if g.nextID == 0 {
		g.nextID = 1
	}
	s.state, s.grant = schedproto.Run, g.nextID
	s.lastRun, g.start = now, now
	g.budget, g.spent, g.from = max(s.credit+s.bonus, 0), 0, now.Add(g.cfg.JoinGrace)
	g.holder, g.phase = s, phaseGranted
	s.stats.Slices++
	g.stats.Switches++
	if !s.waitFrom.IsZero() {
		if now.Sub(s.seated) >= WarmUp {
			s.stats.MaxWait = max(s.stats.MaxWait, now.Sub(s.waitFrom))
		}
		s.waitFrom = time.Time{}
	}
}

// settle gives every container not holding the GPU its state: free ones launch freely, the
// others wait; and keeps the waits owed.
func (g *GPU) settle(now time.Time, sum int) {
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
		case s == g.holder || !g.owed(s, now, sum):
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
		if end := maxTime(now, g.from).Add((g.budget - h.drain - g.spent) * time.Duration(n)); end.Before(t) {
			t = end
		}
	}
	if !t.After(now) {
		t = now.Add(time.Microsecond)
	}
	return t
}
