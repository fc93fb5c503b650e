/*
 * Compute limiter. A device with CUDA_DEVICE_SM_LIMIT = T (1..99 %) gets a budget that launches
 * draw from and wait on (the launch that empties it may overdraw it: progress for any kernel, the
 * debt delays the next ones). The loop is closed on measured busy time, not on a model of what a
 * kernel costs:
 *
 *   U  the container's utilisation of the device in percent over the last second (NVML samples of
 *      the container's processes; the whole device when they cannot be told apart);
 *   r  the launch units this process charged over the same second, a unit being a kernel plus
 *      one per SM-count of its thread blocks ("waves"). A unit is only a pacing grain between
 *      two control steps: what it costs in GPU time is measured, U / r, every 100 ms.
 *
 * Every 100 ms the rate becomes T' / c, c being the measured cost of a unit/s (U / r, smoothed):
 * down at once, up half-way (at most x1.5 per step), so a change of kernel shapes is corrected
 * within a few steps. T' = T + D / TAU, where D, the
 * integral of (T - U) over the run (percent-seconds, counted while the process wanted more than
 * it was given, or was over), removes what the ratio step leaves over: the mix of kernels between
 * the window's launches and its busy time, the lag of the 1 s samples, rounding of U. With D the
 * long-run busy time is T * t up to a bounded remainder whatever the kernels are. Every process of
 * the container runs this loop against the same U, so the container total converges to T.
 *
 * Work, not only time. A share of a power-capped GPU's time buys more work than the same share of
 * a full-load run: dense GEMMs on an H200 run at ~1500 MHz with the card at its 700 W cap and at
 * 1980 MHz when it is busy a third of the time, so 30 % of the time did 35-37 % of the full-load
 * work. The limit is a share of what the GPU does for the workload at full load, so the loop
 * holds the work share W = U * s, s being how much cheaper a unit is now than at full load:
 * s = F / c, F the cost of a unit measured at full load. F is measured by a calibration: the
 * container's first throttled launches (at most once per CALIB_EVERY_S per container, through the
 * region's calib_at) run unthrottled for CALIB_NS — inside the first 2 s, from which the limit is
 * specified — and F is the last second's U / r. With the `default` policy F is measured for free
 * while the switch is off. s is at least 1 (never looser than the time share), at most
 * WORK_FACTOR_MAX, and 1 within WORK_DEADBAND (the spin kernels' s is 1 up to the noise of the
 * readings); the calibrating process publishes it in the region, where the container's other
 * processes take it from.
 *
 * Policy (GPU_CORE_UTILIZATION_POLICY of this process, as upstream): "disable" never limits;
 * "force" always does; "default" limits while the region's util_switch is 1 (stamped 1; the node
 * monitor writes it from the other containers' recent launches on the same GPU, docs/hamicore.md).
 */
#include "limiter.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "devmap.h"
#include "init.h"
#include "log.h"
#include "region.h"
#include "symbols.h"

#define TICK_NS 10000000LL  /* refill every 10 ms */
#define PERIOD_TICKS 10     /* control step every 100 ms */
#define PERIOD_S 0.1
#define WINDOW 10           /* periods in the 1 s window (NVML's sampling window on fakegpu, upstream's "now - 1 s") */
#define MILLI 1000LL        /* tokens are milli-units */
#define RATE_START (200 * MILLI)      /* units/s before anything was measured */
#define RATE_MIN (1 * MILLI)          /* never starve: at least a unit a second */
#define RATE_MAX (1000000000LL * MILLI)
#define TAU_S 2.0           /* time constant of the integral term */
#define COST_GAIN 0.2       /* smoothing of the measured cost of a unit, per step */
#define RAMP_COST_GAIN 0.5  /* the same during the first 2 s, when the start's readings are stale */
#define INTEGRAL_AFTER (2 * WINDOW) /* control steps before the integral starts */
#define INTEGRAL_SHARE 0.25 /* the integral moves the target by at most a quarter of T */
#define IDLE_PERIODS 50     /* the watcher exits after 5 s without a throttled launch */
#define MAX_SAMPLES 256
#define CALIB_NS 1500000000LL   /* the calibration's unthrottled run; F is taken from its last second */
#define CALIB_SLACK_NS 1000000000LL /* the watcher ends it at its next step; launches alone a second later */
#define CALIB_EVERY_S 300       /* at most one calibration per container in 5 minutes */
#define CALIB_JOIN_S 10         /* the calibrating process's other devices may join it this long */
#define BLIND_MAX 100           /* after a calibration: at most 10 s waiting for its queue to drain */
#define WORK_FACTOR_MAX 1.5     /* H200 GEMMs: 1.2-1.3 (1980 vs 1500 MHz); more is a broken reading */
#define WORK_DEADBAND 0.02

int lb_launch_limited;

struct bucket {
    _Atomic int64_t tokens;     /* milli-units; launches wait while <= 0 */
    _Atomic int64_t rate;       /* milli-units per second */
    _Atomic uint64_t launched;  /* milli-units charged, ever */
    _Atomic int in_use;         /* a throttled launch happened: the watcher serves this device */
    _Atomic int hungry;         /* a launch waited since the last control step */
    _Atomic uint32_t sm;        /* SM count (blocks per unit), 0 until asked */
    _Atomic int64_t calib_until; /* CLOCK_MONOTONIC ns: calibrating (unthrottled) until then; 0 = not */
    _Atomic int calib_asked;    /* the first throttled launch came: the watcher decides on a calibration */
    uint32_t limit;             /* percent 1..99; 0 = not limited */
    /* watcher-only state */
    uint64_t seen;              /* `launched` at the previous control step */
    uint64_t ring[WINDOW];      /* milli-units launched per period, last WINDOW periods */
    unsigned head, steps;
    unsigned age;               /* control steps of this episode, counted up to 2 s */
    double deficit;             /* integral of (T - U), percent-seconds */
    double cost;                /* smoothed U / r: percent per milli-unit/s, 0 until measured */
    double full;                /* the same at full load (F), 0 = not measured */
    double clk_full;            /* mean SM clock (MHz) over F's window, 0 = not known */
    double clk;                 /* SM clock now, smoothed; 0 = not known */
    double clk_sum;             /* calibration: clock readings of its last second */
    unsigned clk_n;
    unsigned blind;             /* control steps since a calibration while its queue drains; 0 = none */
    int64_t drain_from;         /* CLOCK_MONOTONIC ns: the device's readings cover the calibration from then */
    unsigned drained;           /* control steps since the readings first showed the queue empty */
};

static struct bucket g_b[LB_REGION_MAX_DEVICES];
static _Atomic int g_watcher; /* 0 none, 1 running (or starting) */
static _Atomic int64_t g_calib_won; /* CLOCK_REALTIME s when this process won the region's calibration */

void lb_limiter_init(void)
{
    if (!lb_region || lb_cfg.policy == LB_POLICY_DISABLE)
        return;
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++) {
        uint32_t l = lb_region->sm_limit[d]; /* the region's: first writer wins, as for memory */
        if (l > 0 && l < 100) {
            g_b[d].limit = l;
            atomic_store(&g_b[d].rate, RATE_START);
            lb_launch_limited = 1;
        }
    }
}

void lb_limiter_after_fork(void)
{
    /* Threads do not survive fork: the child starts its own watcher on its first launch. Its
     * kernels may not be the parent's: it takes the work factor from the region, not F. */
    atomic_store(&g_watcher, 0);
    atomic_store(&g_calib_won, 0);
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++)
        g_b[d].full = 0;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void refill(struct bucket *b)
{
    int64_t rate = atomic_load(&b->rate);
    int64_t add = rate / (1000000000LL / TICK_NS);
    int64_t cap = 2 * add > MILLI ? 2 * add : MILLI; /* bursts of at most two ticks' worth */
    int64_t t = atomic_load(&b->tokens), n;
    do {
        n = t + add > cap ? (t > cap ? cap : t) : t + add;
        if (n == t)
            return;
    } while (!atomic_compare_exchange_weak(&b->tokens, &t, n));
}

/* The container's processes' pids as NVML reports them: the host pid when known, else the pid
 * (right when the container shares the host's PID namespace, and on fakegpu). */
static int container_pids(unsigned int *pids, int max)
{
    struct lb_region_slot *s = lb_region_slots(lb_region);
    uint32_t hwm = atomic_load(&lb_region->slot_hwm);
    int n = 0;
    for (uint32_t i = 0; i < hwm && i < LB_REGION_MAX_SLOTS && n < max; i++)
        if (atomic_load(&s[i].state) == LB_SLOT_ACTIVE)
            pids[n++] = (unsigned)(s[i].hostpid ? s[i].hostpid : s[i].pid);
    return n;
}

/* NVML's handle of CUDA device d (an ordinal, mapped by UUID); 0 on success. */
static int nvml_device(int d, nvmlDevice_t *h)
{
    __typeof__(&nvmlDeviceGetHandleByIndex_v2) by_index = LB_REAL(nvmlDeviceGetHandleByIndex_v2);
    return !by_index || by_index((unsigned)lb_nvml_index(d), h) != NVML_SUCCESS ? -1 : 0;
}

/* The whole device's utilisation in percent over NVML's last sample period; -1 if unknown. */
static int util_of(nvmlDevice_t h)
{
    __typeof__(&nvmlDeviceGetUtilizationRates) whole = LB_REAL(nvmlDeviceGetUtilizationRates);
    nvmlUtilization_t u;
    return !whole || whole(h, &u) != NVML_SUCCESS ? -1 : (int)u.gpu;
}

static int device_util(int d)
{
    nvmlDevice_t h;
    return nvml_device(d, &h) ? -1 : util_of(h);
}

/* The device's SM clock in MHz, 0 if NVML cannot say. */
static unsigned sm_clock(int d)
{
    __typeof__(&nvmlDeviceGetClockInfo) info = LB_REAL(nvmlDeviceGetClockInfo);
    nvmlDevice_t h;
    unsigned mhz = 0;
    if (!info || nvml_device(d, &h) || info(h, NVML_CLOCK_SM, &mhz) != NVML_SUCCESS)
        return 0;
    return mhz;
}

static int shared_now(int d);

/* 1 if NVML lists one of pids (n of them) as running on device h. */
static int pids_listed(nvmlDevice_t h, const unsigned int *pids, int n)
{
    static nvmlProcessInfo_t infos[MAX_SAMPLES]; /* watcher thread only */
    __typeof__(&nvmlDeviceGetComputeRunningProcesses_v3) procs = LB_REAL(nvmlDeviceGetComputeRunningProcesses_v3);
    unsigned int m = MAX_SAMPLES;
    if (!procs || procs(h, &m, infos) != NVML_SUCCESS)
        return 0;
    for (unsigned i = 0; i < m && i < MAX_SAMPLES; i++)
        for (int k = 0; k < n; k++)
            if (infos[i].pid == pids[k])
                return 1;
    return 0;
}

/* The container's utilisation of device d in percent over the last second; -1 if unknown
 * (may_hold: in the first seconds of an episode, no sample of ours may be no reading). */
static int container_util(int d, uint64_t launched_in_window, int may_hold)
{
    static nvmlProcessUtilizationSample_t samples[MAX_SAMPLES]; /* watcher thread only */
    static unsigned int pids[LB_REGION_MAX_SLOTS];
    __typeof__(&nvmlDeviceGetProcessUtilization) per_proc = LB_REAL(nvmlDeviceGetProcessUtilization);
    nvmlDevice_t h;
    if (nvml_device(d, &h))
        return -1;
    int found = 0;
    unsigned sum = 0;
    if (per_proc) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long long since = ((unsigned long long)ts.tv_sec - 1) * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000;
        unsigned int n = MAX_SAMPLES;
        nvmlReturn_t r = per_proc(h, samples, &n, since);
        if (r == NVML_SUCCESS || r == NVML_ERROR_NOT_FOUND) {
            int np = container_pids(pids, LB_REGION_MAX_SLOTS);
            for (unsigned i = 0; r == NVML_SUCCESS && i < n && i < MAX_SAMPLES; i++)
                for (int k = 0; k < np; k++)
                    if (samples[i].pid == pids[k]) {
                        sum += samples[i].smUtil;
                        found = 1;
                        break;
                    }
            if (found || launched_in_window == 0)
                return sum > 100 ? 100 : (int)sum;
            /* Work was launched but no sample is ours. Alone on the device, the device's
             * reading is ours. Beside another container, if NVML lists one of our pids on the
             * device, they can be matched, so our share is just below what NVML samples now:
             * an H200 gives no sample to a process that barely ran beside a busy one, and none
             * to work still queued behind a neighbour's. With the device saturated in the first
             * seconds of an episode (our first launches wait behind a neighbour's queue) that
             * is no reading: the rate is kept. Otherwise the whole device stands for it: below
             * saturation queued work runs, so ours would show soon (holding there left two
             * containers whose small shares NVML never sampled at their start rate), and later
             * a saturated device may be our own overrun (on an H200, whose samples come once
             * a second, holding then let a 50 % container run at 0.91).
             * Taking it for the whole device made a neighbour that started beside a
             * calibration's full queue see 100 %, learn a cost 150 times too high and starve
             * itself for seconds; taking it for 0 (tried on an H200 with a 30 % and a 50 %
             * container, whose samples under time-slicing come once a second in 20 % steps)
             * let the 30 % one run at 0.68. */
            int all = util_of(h);
            if (may_hold && all >= 95 && shared_now(d) && pids_listed(h, pids, np))
                return -1;
            return all;
        }
    }
    /* The pids cannot be matched (a PID namespace without host pids): the whole device, never
     * over the limit, at worst under it when other tenants are busy. */
    return util_of(h);
}

/* `default` with the node monitor's switch off: not limited now. */
static int switched_off(void)
{
    return lb_cfg.policy == LB_POLICY_DEFAULT && !atomic_load_explicit(&lb_region->util_switch, memory_order_relaxed);
}

static int64_t realtime_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec;
}

/* 1 if a process of another container has a context on device d (or NVML cannot say): more
 * processes on the device than the container has. Counted, not matched, because a container's
 * pids are often not the ones NVML reports. */
static int shared_now(int d)
{
    __typeof__(&nvmlInit_v2) init = LB_REAL(nvmlInit_v2);
    __typeof__(&nvmlDeviceGetComputeRunningProcesses_v3) procs = LB_REAL(nvmlDeviceGetComputeRunningProcesses_v3);
    nvmlDevice_t h;
    if (!init || !procs || init() != NVML_SUCCESS || nvml_device(d, &h))
        return 1;
    unsigned int n = 0;
    nvmlReturn_t r = procs(h, &n, NULL);
    if (r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT_SIZE)
        return 1;
    unsigned int pids[LB_REGION_MAX_SLOTS];
    return n > (unsigned)container_pids(pids, LB_REGION_MAX_SLOTS);
}

/* The first throttled launch on a device: calibrate if the container has not for CALIB_EVERY_S
 * (one process wins the region's word; its other devices join within CALIB_JOIN_S) and has the
 * GPU to itself. With a neighbour on the GPU its clocks are shared anyway, the unthrottled run
 * would take the neighbour's time, and the launch queue it fills (up to ~1 s of work per
 * process) would drain for seconds at 1 - T - the neighbour's share. */
static void maybe_calibrate(int dev, struct bucket *b)
{
    if (b->full > 0 || switched_off() || shared_now(dev))
        return;
    int64_t now = realtime_s(), won = atomic_load(&g_calib_won);
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
    atomic_store(&b->calib_until, now_ns() + CALIB_NS);
    LB_DEBUG("compute limit: device %d: calibrating at full load for %lld ms", dev, (long long)(CALIB_NS / 1000000));
}

/* s, the work a unit of time buys now relative to full load: this process's F / c, else the
 * container's figure from the region, else 1. F / c alone would also take a change of kernels, or
 * the lag of a deep queue, for a change of speed; a speed-up needs the clock to show it too, so s
 * is at most the SM clock now over the clock at F (1 when NVML gives no clock). */
static double work_factor(int d, struct bucket *b)
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

static int64_t store_rate(struct bucket *b, int64_t next)
{
    next = next < RATE_MIN ? RATE_MIN : next > RATE_MAX ? RATE_MAX : next;
    atomic_store(&b->rate, next);
    return next;
}

/* The rate that does t percent at a cost of c per milli-unit/s, within the bounds. */
static void set_rate(struct bucket *b, double t, double c)
{
    store_rate(b, (int64_t)(t / c));
}

/* A control step of a calibration (calib: its end, CLOCK_MONOTONIC ns). Until its end the
 * launches are unthrottled and the ring counts them. At its end, or when a neighbour appears,
 * the queue it filled drains first (blind, in control); the rate meanwhile is T / F. */
static void calibration_step(int d, struct bucket *b, int u, uint64_t units, int64_t calib, unsigned mhz)
{
    int64_t now = now_ns();
    /* A reading of the device that reaches back before the run's start would show its idle
     * time, not the end of the run's queue. */
    b->drain_from = calib - CALIB_NS + 1100000000LL;
    if (now >= calib - 1000000000LL) /* F's window: the clock it ran at */
        b->clk_sum += mhz, b->clk_n += mhz > 0;
    int stop = now < calib && shared_now(d);
    if (now < calib && !stop)
        return;
    double t = b->limit;
    b->steps = WINDOW, b->deficit = 0;
    atomic_store(&b->calib_until, 0);
    if (stop) {
        /* A stopped run's readings are not all its own, and its first instants filled the
         * launch queue (up to ~1 s of work in a few ms): nothing can be learned from it, not
         * even a cost to pace the drain with (taken from its last half second it came out a
         * third of the real one, and the drain ran at three times the limit). The rate stays
         * the one before the run; after the drain the loop ramps as at a start. */
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

static void control(int d, struct bucket *b)
{
    uint64_t launched = atomic_load(&b->launched);
    b->ring[b->head] = launched - b->seen;
    b->head = (b->head + 1) % WINDOW;
    b->seen = launched;
    uint64_t units = 0; /* milli-units in the 1 s window = milli-units per second */
    for (int i = 0; i < WINDOW; i++)
        units += b->ring[i];
    int hungry = atomic_exchange(&b->hungry, 0);
    int u = container_util(d, units, b->age < 2 * WINDOW);
    b->age += b->age < 2 * WINDOW;
    if (u < 0)
        return; /* no reading: keep the rate */
    double t = b->limit;
    /* A calibration starts one control step after the first throttled launch, not at it: two
     * containers started together have both made their contexts by then, and see each other. */
    if (atomic_exchange(&b->calib_asked, 0))
        maybe_calibrate(d, b);
    int64_t calib = atomic_load(&b->calib_until);
    /* The clock matters to the work factor (this process's F) and while F is measured. */
    unsigned mhz = calib || b->full > 0 || switched_off() ? sm_clock(d) : 0;
    b->clk = !mhz ? 0 : b->clk > 0 ? b->clk + COST_GAIN * (mhz - b->clk) : mhz;
    if (calib) {
        calibration_step(d, b, u, units, calib, mhz);
        return;
    }
    if (b->blind) {
        /* The launch queue the unthrottled run filled (up to ~1 s of work) drains at 1 - T of
         * the GPU: the readings stay at 100 % until it has, and hold it for a window after.
         * Meanwhile they say nothing of the throttled launches: keep the rate at T / F. */
        if (b->drained || (now_ns() >= b->drain_from && device_util(d) < 99))
            b->drained++;
        if (++b->blind < BLIND_MAX && b->drained <= WINDOW)
            return;
        b->blind = 0;
    }
    /* NVML's utilisation is a whole percent: a reading of 1 may stand for 0.1 % or 1.4 %, so the
     * cost of a unit taken from a reading that small can be off by ten times (on an H200 the
     * first readings of a starting process made the loop cut its rate and ramp for 4 s instead
     * of 2). Below u_min a reading only says "too little to show yet". */
    int u_min = b->limit >= 6 ? 3 : 1;
    if (switched_off()) {
        /* Only measure: the cost of a unit, and the rate that would hold T with it. The
         * throttled episode's ramp and integral start when the switch comes on. */
        if (u >= u_min && units > 0) {
            double c = (double)u / (double)units;
            b->cost = b->cost > 0 ? b->cost + COST_GAIN * (c - b->cost) : c;
            b->full = b->cost, b->clk_full = b->clk; /* unthrottled: the full-load cost, and its clock */
            set_rate(b, t, b->cost);
        }
        b->steps = WINDOW, b->deficit = 0; /* past the blind ramp: the cost is known */
        return;
    }
    /* The integral starts after the ramp (2 s: the limit is specified from there on, and paying
     * back the ramp's overshoot would only move the error into the next seconds); it counts a
     * shortfall only while launches were held back, so an idle or lightly loaded process does
     * not save up a burst. */
    double s = work_factor(d, b), w = u * s; /* the work share */
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
    double te = (t + b->deficit / TAU_S) / s; /* the time share that does it */
    if (te > 100)
        te = 100;
    int64_t rate = atomic_load(&b->rate), next = rate;
    /* Up by at most x2 per step while ramping (the first window), x1.5 afterwards: work that has
     * not shown in U yet (queued behind other processes') must not make the rate run away. */
    double up = b->steps <= WINDOW ? 2 : 1.5;
    if (u < u_min || units == 0) {
        /* Held back, but too little to show yet: up, unless the device is saturated, when the
         * work launched is queued behind another's (a neighbour's calibration, or a flood) and
         * shows nothing of what it would cost: a ramp then piles up seconds of work. */
        if (units > 0 && (hungry || u == 0) && device_util(d) < 95)
            next = (int64_t)((double)rate * up);
    } else {
        /* What a unit/s costs in percent, smoothed over ~1 s of steps: a window's mix of
         * kernels varies, the cost of the workload much less. */
        double c = (double)u / (double)units;
        int ramp = b->steps <= INTEGRAL_AFTER;
        b->cost = b->cost > 0 ? b->cost + (ramp ? RAMP_COST_GAIN : COST_GAIN) * (c - b->cost) : c;
        /* Down at once on the dearer of the two estimates (near saturation a late reading
         * means queued work: never wait for it), up half-way and bounded. The integral removes
         * the bias this asymmetry leaves. During the ramp an upward step follows the latest
         * reading: the smoothed cost still remembers the first, coarse readings of the start
         * and would hold the rate low for a second or more (H200: a kernel mix took 4-5 s to
         * reach a 30 % limit). */
        double dear = c > b->cost ? c : b->cost;
        double target = te / dear;
        if (ramp && hungry && te / c > (double)rate)
            target = te / c;
        if (target < (double)rate) {
            next = (int64_t)target;
        } else {
            double half = ((double)rate + target) / 2;
            next = (int64_t)(half < (double)rate * up ? half : (double)rate * up);
        }
    }
    next = store_rate(b, next);
    if (b->full > 0 && b->cost > 0 && b->steps > INTEGRAL_AFTER)
        atomic_store_explicit(&lb_region->work_factor[d], (uint32_t)(s * 1000 + 0.5), memory_order_relaxed);
    /* Once a second at the debug level: what the loop saw and did, for tuning on a real GPU. */
    if (b->steps % WINDOW == 0)
        LB_DEBUG("compute limit: device %d: U %d%% (target %lld.%lld), work factor %lld/1000, SM clock %lld MHz, "
                 "%llu milli-units/s, rate %lld, cost %lld ppm, deficit %lld cs",
                 d, u, (long long)te, (long long)(te * 10) % 10, (long long)(s * 1000 + 0.5), (long long)b->clk,
                 (unsigned long long)units, (long long)next, (long long)(b->cost * 1e6), (long long)(b->deficit * 100));
}

static void *watcher(void *arg)
{
    (void)arg;
    lb_guard_enter(); /* any of our wrappers reached from here passes straight through */
    __typeof__(&nvmlInit_v2) init = LB_REAL(nvmlInit_v2);
    if (!init || init() != NVML_SUCCESS)
        LB_WARN("compute limit: NVML is not available; launches are paced at the learned rate only");
    /* A new episode (first throttled launch, or the first after 5 idle seconds, or a fork
     * child): the learned rate stays, the measurements of the last one do not. */
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++) {
        struct bucket *b = &g_b[d];
        memset(b->ring, 0, sizeof b->ring);
        b->seen = atomic_load(&b->launched);
        b->steps = 0, b->deficit = 0, b->cost = 0, b->age = 0;
    }
    int64_t next = now_ns();
    unsigned tick = 0, idle = 0;
    for (;;) {
        for (int d = 0; d < LB_REGION_MAX_DEVICES; d++)
            if (g_b[d].limit && atomic_load(&g_b[d].in_use))
                refill(&g_b[d]);
        if (++tick % PERIOD_TICKS == 0) {
            int busy = 0;
            for (int d = 0; d < LB_REGION_MAX_DEVICES; d++) {
                struct bucket *b = &g_b[d];
                if (!b->limit || !atomic_load(&b->in_use))
                    continue;
                busy |= atomic_load(&b->launched) != b->seen;
                control(d, b);
            }
            idle = busy ? 0 : idle + 1;
            if (idle >= IDLE_PERIODS) {
                /* Nobody launches: leave (a launch starts a new one). A launcher that saw us
                 * running re-checks while it waits, so none is left without refills. */
                atomic_store(&g_watcher, 0);
                return NULL;
            }
        }
        next += TICK_NS;
        struct timespec ts = {(time_t)(next / 1000000000LL), (long)(next % 1000000000LL)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
    }
}

/* 1 if a watcher runs (or another thread is starting one), 0 if none can be started. */
static int ensure_watcher(void)
{
    int zero = 0;
    if (atomic_load_explicit(&g_watcher, memory_order_relaxed) || !atomic_compare_exchange_strong(&g_watcher, &zero, 1))
        return 1;
    /* The application's signals must never be delivered to our thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 256 * 1024);
    pthread_t t;
    int r = pthread_create(&t, &a, watcher, NULL);
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        atomic_store(&g_watcher, 0);
        LB_ERROR("compute limit: cannot start the watcher thread (error %d); launches are not limited", r);
        return 0;
    }
    return 1;
}

static uint32_t sm_count(int dev)
{
    __typeof__(&cuDeviceGetAttribute) attr = LB_REAL(cuDeviceGetAttribute);
    int v = 0;
    if (!attr || attr(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, (CUdevice)dev) != CUDA_SUCCESS || v <= 0)
        v = 1;
    return (uint32_t)v;
}

void lb_limiter_take(int dev, uint64_t kernels, uint64_t blocks)
{
    struct bucket *b = &g_b[dev];
    if (!b->limit)
        return;
    int idle = 0;
    if (!atomic_load_explicit(&b->in_use, memory_order_relaxed) && atomic_compare_exchange_strong(&b->in_use, &idle, 1))
        atomic_store(&b->calib_asked, 1);
    uint32_t sm = atomic_load_explicit(&b->sm, memory_order_relaxed);
    if (!sm)
        atomic_store(&b->sm, sm = sm_count(dev));
    /* units = kernels + blocks / SMs, in milli-units, saturating */
    uint64_t cap = (uint64_t)(RATE_MAX / MILLI);
    uint64_t k = kernels < cap ? kernels : cap, w = blocks / sm < cap ? blocks / sm : cap;
    uint64_t frac = blocks / sm < cap ? (blocks % sm) * MILLI / sm : 0;
    int64_t cost = (int64_t)((k + w) * MILLI + frac);
    if (cost > RATE_MAX)
        cost = RATE_MAX;
    /* The watcher ends a calibration at the control step that measures it (its ring must not
     * hold throttled launches); the launches end it alone should the watcher not come. */
    int64_t calib = atomic_load_explicit(&b->calib_until, memory_order_relaxed);
    if (switched_off() || (calib && now_ns() < calib + CALIB_SLACK_NS)) {
        /* Not limited, but measured: the watcher keeps pairing this work with U, so the moment
         * the switch comes on the rate is already the right one (and the work queued while
         * unthrottled is not mistaken for the cost of the first throttled launches). The same
         * during a calibration. */
        ensure_watcher();
        atomic_fetch_add(&b->launched, (uint64_t)cost);
        return;
    }
    while (atomic_load(&b->tokens) <= 0) {
        /* "Held back" for every control step this wait spans, not only the first: a launch
         * that overdrew the bucket may wait several steps. */
        atomic_store_explicit(&b->hungry, 1, memory_order_relaxed);
        /* Re-checked while waiting: the watcher may have left idle just before we came. */
        if (!ensure_watcher())
            return; /* no refills will come: not limited rather than blocked forever */
        struct timespec ts = {0, 1000000}; /* 1 ms: a tenth of a refill tick */
        nanosleep(&ts, NULL);
        if (switched_off())
            break; /* the monitor let go meanwhile */
    }
    ensure_watcher();
    atomic_fetch_sub(&b->tokens, cost);
    atomic_fetch_add(&b->launched, (uint64_t)cost);
}

/* Once per monitor period per container (the monitor clears the word): also stamp the GPUs'
 * UUIDs, so the monitor knows which containers share a physical GPU. */
void lb_mark_launch_slow(void)
{
    static _Atomic int stamped; /* this process stamped the UUIDs it can see */
    struct lb_region_header *h = lb_region;
    if (!atomic_exchange(&stamped, 1)) {
        __typeof__(&cuDeviceGetCount) count = LB_REAL(cuDeviceGetCount);
        __typeof__(&cuDeviceGet) get = LB_REAL(cuDeviceGet);
        __typeof__(&cuDeviceGetUuid) uuid = LB_REAL(cuDeviceGetUuid);
        int n = 0;
        if (count && get && uuid && count(&n) == CUDA_SUCCESS) {
            for (int i = 0; i < n && i < LB_REGION_MAX_DEVICES; i++) {
                CUdevice d;
                CUuuid id;
                static const uint8_t zero[16];
                if (get(&d, i) != CUDA_SUCCESS || uuid(&id, d) != CUDA_SUCCESS)
                    continue;
                if (!memcmp(h->dev_uuid[i], zero, sizeof zero))
                    memcpy(h->dev_uuid[i], id.bytes, sizeof id.bytes);
            }
        }
    }
    atomic_store_explicit(&h->recent_kernel, 1, memory_order_relaxed);
}
