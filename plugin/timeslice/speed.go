package timeslice

import "time"

// A limit is a share of the work the GPU does for a workload at full load, and the judge counts
// work. A power-capped GPU runs faster while it is partly idle (an H200's dense GEMMs: about
// 1500 MHz at full load, up to 1980 MHz when busy a third of the time), so a share of its time
// buys more than that share of its full-load work: slices of 30 % and 50 % of the time gave
// 0.32 and 0.545 of the work (docs/benchmarks.md). The scheduler therefore charges a slice its
// time times the GPU's speed against full load, read from the SM clock:
//
//	speed = 1 + (clock now / clock at full load − 1) × the card's gain (cards.go), 1 within 2 %,
//	at most MaxSpeed.
//
// The clock at full load is learned whenever the GPU is busy for a whole learning window (the
// limits of its busy containers sum to 100 % or more, or an unthrottled container fills the
// rest). A GPU whose busy containers are all limited to less than the whole of it never is: when
// a container starts taking turns there, the scheduler calibrates — for Config.Calibrate it gives
// the busy limited containers slices in proportion to their limits over the whole period (each
// gets limit/Σ limits instead of limit/100), and learns the clock of the last part. A container
// runs over its limit by that factor for that long, once, in its first seconds (the limit is
// specified from 2 s after a container starts). Without clock readings (no NVML) the speed is 1:
// slices share time, as before.

// MaxSpeed bounds the speed a clock reading may claim (the H200's GEMMs: 1.32 at most).
const MaxSpeed = 1.5

// speedDeadBand: a clock within this fraction of the full-load clock is full speed (the clock
// moves by a few MHz under a steady load).
const speedDeadBand = 0.02

// fullLoadBusy: a learning window this busy (slices and drains) is a full-load one.
const fullLoadBusy = 0.97

type speedModel struct {
	full float64 // the SM clock at full load (MHz); 0: not known
	clk  float64 // the SM clock now (MHz), smoothed; 0: no reading
	gain float64 // the part of the clock's gain that is work (ClockGain); 0: all of it

	// The learning window: from winFrom, how long a slice or a drain ran, and the clock's
	// readings.
	winFrom time.Time
	winBusy time.Duration
	winSum  float64
	winN    int

	calFrom, calUntil time.Time // the last calibration ran over [calFrom, calUntil)
	learned           time.Time // full was last learned then
}

// Clock records a reading of the GPU's SM clock (MHz) at now.
func (g *GPU) Clock(now time.Time, mhz float64) {
	m := &g.speed
	if mhz <= 0 {
		return
	}
	if m.clk == 0 {
		m.clk = mhz
	}
	m.clk += (mhz - m.clk) / 4 // readings every ClockEvery: smoothed over about 4 of them
	if g.tracer != nil {
		g.tracer.Trace(TraceEvent{At: now, GPU: g.UUID.String(), Event: EvClock, Speed: g.factor(), ClockMHz: mhz, FullMHz: m.full})
	}
	if !now.Before(m.winFrom) {
		m.winSum += mhz
		m.winN++
	}
}

// factor is the GPU's speed against full load: what a second of its time is charged. The clock's
// gain over full load counts for the part of it that is work on this card (cards.go).
func (g *GPU) factor() float64 {
	m := &g.speed
	if m.full <= 0 || m.clk <= m.full*(1+speedDeadBand) {
		return 1
	}
	gain := m.gain
	if gain <= 0 {
		gain = 1
	}
	return min(1+(m.clk/m.full-1)*gain, MaxSpeed)
}

// SetClockGain sets the part of the clock's gain over full load that is work on this GPU
// (ClockGain; 0 or less: all of it).
func (g *GPU) SetClockGain(gain float64) { g.speed.gain = gain }

// work is d of the GPU's time in full-load time, as charged.
func (g *GPU) work(d time.Duration) time.Duration {
	return time.Duration(float64(d) * g.factor())
}

// wall is the GPU's time that d of full-load time takes now.
func (g *GPU) wall(d time.Duration) time.Duration {
	return time.Duration(float64(d) / g.factor())
}

// calibrating reports a calibration running at now.
func (g *GPU) calibrating(now time.Time) bool {
	return !g.speed.calUntil.IsZero() && now.Before(g.speed.calUntil)
}

// learnSpeed closes the learning window when it is over: a full-load window's mean clock is the
// clock at full load. busy is how long a slice or a drain ran since the last step.
func (g *GPU) learnSpeed(now time.Time, busy time.Duration) {
	m := &g.speed
	if m.winFrom.IsZero() {
		m.winFrom = now
	}
	if now.After(m.winFrom) {
		m.winBusy += min(busy, now.Sub(m.winFrom))
	}
	win := g.cfg.SpeedWindow
	if now.Sub(m.winFrom) < win {
		return
	}
	if m.winN > 0 && float64(m.winBusy) >= fullLoadBusy*float64(now.Sub(m.winFrom)) {
		m.full, m.learned = m.winSum/float64(m.winN), now
		g.trace(now, EvLearn, nil)
	}
	m.winFrom, m.winBusy, m.winSum, m.winN = now, 0, 0, 0
}

// maybeCalibrate starts a calibration when a limited container is busy that no calibration has
// seen, the GPU has clock readings, its busy containers are all limited to less than the whole
// of it (otherwise it runs at full load and learns by itself), and neither a calibration nor a
// full-load window was in the last Config.Recalibrate (containers started a second apart share
// one: a second calibration would run over the first one's judged windows).
func (g *GPU) maybeCalibrate(now time.Time, sum int) {
	m := &g.speed
	if g.cfg.Calibrate <= 0 || m.clk == 0 || g.calibrating(now) || sum >= 100 || sum == 0 {
		return
	}
	fresh := false
	for _, s := range g.seats {
		busy := g.busy(s, now)
		if busy && s.mode != modeLimited {
			return // an unthrottled neighbour fills what the limits leave
		}
		fresh = fresh || (busy && s.mode == modeLimited && !s.calibrated)
	}
	if !fresh {
		return
	}
	for _, s := range g.seats {
		if s.mode == modeLimited && g.busy(s, now) {
			s.calibrated = true
		}
	}
	recent := func(t time.Time) bool { return !t.IsZero() && now.Sub(t) < g.cfg.Recalibrate }
	if recent(m.calFrom) || (m.full > 0 && recent(m.learned)) {
		return
	}
	// The window learns from the calibration's end less SpeedWindow, when the slices have
	// filled the GPU long enough for its clock to settle.
	m.calFrom, m.calUntil = now, now.Add(g.cfg.Calibrate)
	g.trace(now, EvCalib, nil)
	m.winFrom, m.winBusy, m.winSum, m.winN = m.calUntil.Add(-g.cfg.SpeedWindow), 0, 0, 0
	g.stats.Calibrations++
}

// denominator is what the busy limited containers' limits are shares of: the whole GPU (100),
// or their sum when it is more, or during a calibration.
func (g *GPU) denominator(sum int, now time.Time) int {
	if sum > 100 || (sum > 0 && g.calibrating(now)) {
		return sum
	}
	return 100
}
