package timeslice

import "time"

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
	// ClockEvery: how often the node reads each GPU's SM clock (Node.Clocks), which a slice's
	// charge follows (speed.go).
	ClockEvery time.Duration
	// SpeedWindow: the GPU's clock at full load is the mean of a window this long in which slices
	// kept it busy; a calibration's last SpeedWindow is one.
	SpeedWindow time.Duration
	// Calibrate: how long a calibration fills the GPU with the limited containers' slices
	// (speed.go); 0: never (slices share time when the GPU never runs at full load by itself).
	Calibrate time.Duration
	// ClockGain: the part of the SM clock's gain over full load that is work (cards.go); 0: the
	// card's, by its name.
	ClockGain float64
	// Recalibrate: a calibration is due, for a container that starts taking turns, only when the
	// clock at full load was last learned (or a calibration ran) longer ago than this.
	Recalibrate time.Duration
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
		ActiveHold:  100 * time.Millisecond,
		ClockEvery:  20 * time.Millisecond,
		SpeedWindow: time.Second,
		Calibrate:   1500 * time.Millisecond,
		Recalibrate: 30 * time.Second,
	}
}
