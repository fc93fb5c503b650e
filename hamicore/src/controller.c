/*
 * The fallback compute controller: what paces a container when no node scheduler grants it slices
 * (bare Docker, an older plugin, the scheduler down; docs/hamicore.md, "Without the scheduler").
 * A device with CUDA_DEVICE_SM_LIMIT = T (1..99 %) gets a budget that launches draw from and wait
 * on (limiter.c); this file is the control law that sets its rate. The loop is closed on measured
 * busy time, not on a model of what a kernel costs:
 *
 *   U  the container's utilisation of the device in percent over the last second (sensors.c);
 *   r  the launch units this process charged over the same second, a unit being a kernel plus
 *      one per SM-count of its thread blocks ("waves"): only a pacing grain between two control
 *      steps; what it costs in GPU time is measured, U / r, every 100 ms.
 *
 * Every 100 ms the rate becomes T' / c, c the measured cost of a unit/s (U / r, smoothed): down at
 * once, up half-way (at most x1.5 per step). T' = T + D / TAU, D the integral of (T - U) over the
 * run (counted while the process wanted more than it was given, or was over), which removes what
 * the ratio step leaves over. The loop holds the work share W = U * s, s how much cheaper a unit is
 * now than at full load (F / c, F measured by a short unthrottled calibration), so a power-capped
 * GPU's faster lightly-loaded clocks do not loosen the limit. Policy: "disable" never limits,
 * "force" always does, "default" limits while the region's util_switch is 1 (the node monitor
 * writes it). What each rule fixed, measured on an H200 and on fakegpu, is in docs/benchmarks.md
 * ("The fallback controller's lab notes").
 */
#include "controller.h"

#include <stdatomic.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "region.h"

#define PERIOD_S 0.1
#define TAU_S 2.0           /* time constant of the integral term */
#define COST_GAIN 0.2       /* smoothing of the measured cost of a unit, per step */
#define RAMP_COST_GAIN 0.5  /* the same during the first 2 s, when the start's readings are stale */
#define INTEGRAL_AFTER (2 * LB_CTL_WINDOW) /* control steps before the integral starts */
#define INTEGRAL_SHARE 0.25 /* the integral moves the target by at most a quarter of T */
#define CALIB_NS 1500000000LL   /* the calibration's unthrottled run; F is taken from its last second */
#define CALIB_EVERY_S 300       /* at most one calibration per container in 5 minutes */
#define CALIB_JOIN_S 10         /* the calibrating process's other devices may join it this long */
#define BLIND_MAX 100           /* after a calibration: at most 10 s waiting for its queue to drain */
#define WORK_FACTOR_MAX 1.5     /* more is a broken reading (H200 GEMMs: 1.2-1.3, lab notes) */
#define WORK_DEADBAND 0.02

static _Atomic int64_t g_calib_won; /* CLOCK_REALTIME s when this process won the region's calibration */

void lb_ctl_forget_calibration(void) { atomic_store(&g_calib_won, 0); }

void lb_ctl_after_fork(struct lb_bucket *b) { b->full = 0; }

void lb_ctl_episode(struct lb_bucket *b)
{
    memset(b->ring, 0, sizeof b->ring);
    b->seen = atomic_load(&b->launched);
    b->steps = 0, b->deficit = 0, b->cost = 0, b->age = 0;
}

/* The first throttled launch on a device: calibrate if the container has not for CALIB_EVERY_S
 * (one process wins the region's word; its other devices join within CALIB_JOIN_S) and has the
 * GPU to itself. With a neighbour on the GPU its clocks are shared anyway, the unthrottled run
 * would take the neighbour's time, and the launch queue it fills (up to ~1 s of work per
 * process) would drain for seconds at 1 - T - the neighbour's share. */
static void maybe_calibrate(int dev, struct lb_bucket *b, const struct lb_sensors *sn)
{
    if (b->full > 0 || atomic_load(&b->scheduled) || sn->switched_off() || sn->shared_now(dev))
        return;
    int64_t now = sn->realtime_s(), won = atomic_load(&g_calib_won);
    if (!won || now - won > CALIB_JOIN_S) {
        uint64_t last = atomic_load(&lb_region->calib_at);
        /* A stamp from the future (a clock step back) does not block calibration forever. */
        if (last && (uint64_t)now >= last && (uint64_t)now - last < CALIB_EVERY_S)
            return;
        if (!atomic_compare_exchange_strong(&lb_region->calib_at, &last, (uint64_t)now))
            return; /* another process of the container won */
        atomic_store(&g_calib_won, now);
    }
    b->clk_sum = 0, b->clk_n = 0; /* the watcher reads them once calib_until is set */
    atomic_store(&b->calib_until, sn->now_ns() + CALIB_NS);
    LB_DEBUG("compute limit: device %d: calibrating at full load for %lld ms", dev, (long long)(CALIB_NS / 1000000));
}

/* Launches of a control step or more are never calibrated: a second holds too few of them to
 * measure what a unit costs (a run beside 1 s kernels saw no launch in its last second and
 * learned nothing), and the run's launches are not charged to the GPU-time ledger: a 1 s kernel
 * launched in it would run unpaced, and queue another behind it. The decision waits, at most a
 * control window, for a launch's time (pacetime.h): one seen complete, or one running for that
 * long. 1 while it does not calibrate now. */
static int calibration_waits(int dev, struct lb_bucket *b)
{
    int64_t g = atomic_load(&b->launch_ns);
    if (g >= LB_CALIB_LONG_NS) {
        LB_DEBUG("compute limit: device %d: launches of %lld ms: no calibration run", dev, (long long)(g / 1000000));
        return 1;
    }
    if (!atomic_load(&b->launch_measured) && b->calib_waited < LB_CTL_WINDOW) {
        b->calib_waited++;
        atomic_store(&b->calib_asked, 1); /* asked again at the next step */
        return 1;
    }
    return 0;
}

/* s, the work a unit of time buys now relative to full load: this process's F / c, else the
 * container's figure from the region, else 1. F / c alone would also take a change of kernels, or
 * the lag of a deep queue, for a change of speed; a speed-up needs the clock to show it too, so s
 * is at most the SM clock now over the clock at F (1 when NVML gives no clock). */
static double work_factor(int d, struct lb_bucket *b)
{
    double s = 1;
    if (b->full > 0 && b->cost > 0) {
        s = b->full / b->cost;
        double ck = b->clk_full > 0 && b->clk > 0 ? b->clk / b->clk_full : 1;
        if (s > ck)
            s = ck;
    } else {
        uint32_t m = atomic_load_explicit(&lb_region->work_factor[d], memory_order_relaxed);
        if (m >= 1000 && m <= WORK_FACTOR_MAX * 1000)
            s = m / 1000.0;
    }
    /* 1 up to the deadband, then a ramp that reaches s itself at twice the deadband */
    if (s <= 1 + WORK_DEADBAND)
        return 1;
    if (s < 1 + 2 * WORK_DEADBAND)
        s = 1 + 2 * (s - 1 - WORK_DEADBAND);
    return s > WORK_FACTOR_MAX ? WORK_FACTOR_MAX : s;
}

static int64_t store_rate(struct lb_bucket *b, int64_t next)
{
    next = next < LB_RATE_MIN ? LB_RATE_MIN : next > LB_RATE_MAX ? LB_RATE_MAX : next;
    atomic_store(&b->rate, next);
    return next;
}

/* The rate that does t percent at a cost of c per milli-unit/s, within the bounds. */
static void set_rate(struct lb_bucket *b, double t, double c)
{
    store_rate(b, (int64_t)(t / c));
}

/* A control step of a calibration (calib: its end, CLOCK_MONOTONIC ns). Until its end the
 * launches are unthrottled and the ring counts them. At its end, or when a neighbour appears,
 * the queue it filled drains first (blind, in control); the rate meanwhile is T / F. */
static void calibration_step(int d, struct lb_bucket *b, int u, uint64_t units, int64_t calib, unsigned mhz,
                             const struct lb_sensors *sn)
{
    int64_t now = sn->now_ns();
    /* A reading of the device that reaches back before the run's start would show its idle
     * time, not the end of the run's queue. */
    b->drain_from = calib - CALIB_NS + 1100000000LL;
    if (now >= calib - 1000000000LL) /* F's window: the clock it ran at */
        b->clk_sum += mhz, b->clk_n += mhz > 0;
    int stop = now < calib && sn->shared_now(d);
    if (now < calib && !stop)
        return;
    double t = b->limit;
    b->steps = LB_CTL_WINDOW, b->deficit = 0;
    atomic_store(&b->calib_until, 0);
    if (stop) {
        /* A stopped run's readings are not all its own, and its first instants filled the
         * launch queue (up to ~1 s of work in a few ms): nothing can be learned from it, not
         * even a cost to pace the drain with (lab notes). The rate stays the one before the
         * run; after the drain the loop ramps as at a start. */
        b->steps = 0, b->cost = 0;
        b->blind = 1, b->drained = 0;
        LB_DEBUG("compute limit: device %d: calibration stopped: another container uses the GPU", d);
        return;
    }
    /* The run's last second (its queue was full since its start): F = U / r at full load. */
    if (u >= 50 && units > 0) {
        b->full = b->cost = (double)u / (double)units;
        b->clk_full = b->clk_n ? b->clk_sum / b->clk_n : 0;
        set_rate(b, t, b->full);
        b->blind = 1, b->drained = 0;
    }
    LB_DEBUG("compute limit: device %d: calibrated: U %d%%, %llu milli-units/s, cost %lld ppm, SM clock %lld MHz", d, u,
             (unsigned long long)units, (long long)(b->full * 1e6), (long long)b->clk_full);
}

/* After an unthrottled calibration run the readings say nothing of the throttled launches until
 * the launch queue that run filled has drained: 1 while they are still to be ignored. */
static int still_blind(int d, struct lb_bucket *b, const struct lb_sensors *sn)
{
    if (!b->blind)
        return 0;
    /* The launch queue the unthrottled run filled (up to ~1 s of work) drains at 1 - T of
     * the GPU: the readings stay at 100 % until it has, and hold it for a window after.
     * Meanwhile they say nothing of the throttled launches: keep the rate at T / F. */
    if (b->drained || (sn->now_ns() >= b->drain_from && sn->device_util(d) < 99))
        b->drained++;
    if (++b->blind < BLIND_MAX && b->drained <= LB_CTL_WINDOW)
        return 1;
    b->blind = 0;
    return 0;
}

/* The switch is off: only measure the cost of a unit, and the rate that would hold T with it. The
 * throttled episode's ramp and integral start when the switch comes on. */
static void measure_only(struct lb_bucket *b, double t, int u, int u_min, uint64_t units)
{
    if (u >= u_min && units > 0) {
        double c = (double)u / (double)units;
        b->cost = b->cost > 0 ? b->cost + COST_GAIN * (c - b->cost) : c;
        b->full = b->cost, b->clk_full = b->clk; /* unthrottled: the full-load cost, and its clock */
        set_rate(b, t, b->cost);
    }
    b->steps = LB_CTL_WINDOW, b->deficit = 0; /* past the blind ramp: the cost is known */
}

/* The time share that holds the work share w at T: T corrected by the integral, over the work
 * factor s. The integral starts after the ramp (2 s: the limit is specified from there on, and
 * paying back the ramp's overshoot would only move the error into the next seconds); it counts a
 * shortfall only while launches were held back, so an idle or lightly loaded process does not
 * save up a burst. */
static double time_share(struct lb_bucket *b, double t, double s, double w, int hungry)
{
    if (++b->steps > INTEGRAL_AFTER && (hungry || w > t)) {
        /* The correction stays within +-INTEGRAL_SHARE of T: enough for any bias of the ratio
         * step, small enough that a lag-induced overshoot is not paid back by a long starvation. */
        double dmax = t * TAU_S * INTEGRAL_SHARE;
        b->deficit += (t - w) * PERIOD_S;
        if (b->deficit > dmax)
            b->deficit = dmax;
        if (b->deficit < -dmax)
            b->deficit = -dmax;
    }
    double te = (t + b->deficit / TAU_S) / s;
    return te > 100 ? 100 : te;
}

/* The next rate, from the time share te, the reading u and the units launched in the window. */
static int64_t next_rate(int d, struct lb_bucket *b, double te, int u, int u_min, uint64_t units, int hungry,
                         const struct lb_sensors *sn)
{
    int64_t rate = atomic_load(&b->rate), next = rate;
    /* Up by at most x2 per step while ramping (the first window), x1.5 afterwards: work that has
     * not shown in U yet (queued behind other processes') must not make the rate run away. */
    double up = b->steps <= LB_CTL_WINDOW ? 2 : 1.5;
    if (u < u_min || units == 0) {
        /* Held back, but too little to show yet: up, unless the device is saturated, when the
         * work launched is queued behind another's (a neighbour's calibration, or a flood) and
         * shows nothing of what it would cost: a ramp then piles up seconds of work. */
        if (units > 0 && (hungry || u == 0) && sn->device_util(d) < 95)
            next = (int64_t)((double)rate * up);
        return next;
    }
    /* What a unit/s costs in percent, smoothed over ~1 s of steps: a window's mix of
     * kernels varies, the cost of the workload much less. */
    double c = (double)u / (double)units;
    int ramp = b->steps <= INTEGRAL_AFTER;
    b->cost = b->cost > 0 ? b->cost + (ramp ? RAMP_COST_GAIN : COST_GAIN) * (c - b->cost) : c;
    /* Down at once on the dearer of the two estimates (near saturation a late reading
     * means queued work: never wait for it), up half-way and bounded. The integral removes
     * the bias this asymmetry leaves. During the ramp an upward step follows the latest
     * reading: the smoothed cost still remembers the first, coarse readings of the start
     * and would hold the rate low for a second or more (lab notes). */
    double dear = c > b->cost ? c : b->cost;
    double target = te / dear;
    if (ramp && hungry && te / c > (double)rate)
        target = te / c;
    if (target < (double)rate)
        return (int64_t)target;
    double half = ((double)rate + target) / 2;
    return (int64_t)(half < (double)rate * up ? half : (double)rate * up);
}

void lb_ctl_step(int d, struct lb_bucket *b, const struct lb_sensors *sn)
{
    uint64_t launched = atomic_load(&b->launched);
    b->ring[b->head] = launched - b->seen;
    b->head = (b->head + 1) % LB_CTL_WINDOW;
    b->seen = launched;
    uint64_t units = 0; /* milli-units in the 1 s window = milli-units per second */
    for (int i = 0; i < LB_CTL_WINDOW; i++)
        units += b->ring[i];
    int hungry = atomic_exchange(&b->hungry, 0);
    unsigned hold = atomic_load(&b->hold);
    if (hold && atomic_compare_exchange_strong(&b->hold, &hold, hold - 1))
        return; /* seeded from the scheduler's slices: the readings of this window mix its second
                 * under them with the first launches paced alone (limiter.h) */
    int u = sn->container_util(d, units, b->age < 2 * LB_CTL_WINDOW);
    b->age += b->age < 2 * LB_CTL_WINDOW;
    if (u < 0)
        return; /* no reading: keep the rate */
    double t = b->limit;
    /* A calibration starts one control step after the first throttled launch, not at it: two
     * containers started together have both made their contexts by then, and see each other. */
    if (atomic_exchange(&b->calib_asked, 0) && !calibration_waits(d, b))
        maybe_calibrate(d, b, sn);
    int64_t calib = atomic_load(&b->calib_until);
    /* The clock matters to the work factor (this process's F) and while F is measured. */
    unsigned mhz = calib || b->full > 0 || sn->switched_off() ? sn->sm_clock(d) : 0;
    b->clk = !mhz ? 0 : b->clk > 0 ? b->clk + COST_GAIN * (mhz - b->clk) : mhz;
    if (calib) {
        calibration_step(d, b, u, units, calib, mhz, sn);
        return;
    }
    if (still_blind(d, b, sn))
        return;
    /* NVML's utilisation is a whole percent: a reading of 1 may stand for 0.1 % or 1.4 %, so the
     * cost of a unit taken from a reading that small can be off by ten times (lab notes). Below
     * u_min a reading only says "too little to show yet". */
    int u_min = b->limit >= 6 ? 3 : 1;
    if (sn->switched_off()) {
        measure_only(b, t, u, u_min, units);
        return;
    }
    double s = work_factor(d, b), w = u * s; /* the work share */
    atomic_store(&b->share_ppm, (uint32_t)(t * 10000 / s)); /* the GPU-time ledger's: T's time share */
    double te = time_share(b, t, s, w, hungry);
    int64_t next = store_rate(b, next_rate(d, b, te, u, u_min, units, hungry, sn));
    if (b->full > 0 && b->cost > 0 && b->steps > INTEGRAL_AFTER)
        atomic_store_explicit(&lb_region->work_factor[d], (uint32_t)(s * 1000 + 0.5), memory_order_relaxed);
    /* Once a second at the debug level: what the loop saw and did, for tuning on a real GPU. */
    if (b->steps % LB_CTL_WINDOW == 0)
        LB_DEBUG("compute limit: device %d: U %d%% (target %lld.%lld), work factor %lld/1000, SM clock %lld MHz, "
                 "%llu milli-units/s, rate %lld, cost %lld ppm, deficit %lld cs",
                 d, u, (long long)te, (long long)(te * 10) % 10, (long long)(s * 1000 + 0.5), (long long)b->clk,
                 (unsigned long long)units, (long long)next, (long long)(b->cost * 1e6), (long long)(b->deficit * 100));
}
