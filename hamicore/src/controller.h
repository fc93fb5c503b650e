/* The fallback compute controller (controller.c): the control law that paces a container alone,
 * without the node's scheduler, on measured busy time. Its state is one bucket per device, which
 * the launch path draws from (limiter.c) and a control step every 100 ms refills at a new rate. */
#ifndef LB_CONTROLLER_H
#define LB_CONTROLLER_H

#include <stdatomic.h>
#include <stdint.h>

#include "sensors.h"

#define LB_CTL_TICK_NS 10000000LL /* refill every 10 ms */
#define LB_CTL_PERIOD_TICKS 10    /* control step every 100 ms */
#define LB_CTL_WINDOW 10          /* periods in the 1 s window (NVML's sampling window on fakegpu, upstream's "now - 1 s") */
#define LB_MILLI 1000LL           /* tokens are milli-units */
#define LB_RATE_START (200 * LB_MILLI)      /* units/s before anything was measured */
#define LB_RATE_MIN (1 * LB_MILLI)          /* never starve: at least a unit a second */
#define LB_RATE_MAX (1000000000LL * LB_MILLI)
#define LB_CALIB_SLACK_NS 1000000000LL /* the watcher ends a calibration at its next step; launches alone a second later */
#define LB_CALIB_LONG_NS 100000000LL   /* launches of a control step or more are never calibrated (controller.c) */

struct lb_bucket {
    _Atomic int64_t tokens;     /* milli-units; launches wait while <= 0 */
    _Atomic int64_t rate;       /* milli-units per second */
    _Atomic uint64_t launched;  /* milli-units charged, ever */
    _Atomic int in_use;         /* a throttled launch happened: the watcher serves this device */
    _Atomic int hungry;         /* a launch waited since the last control step */
    _Atomic uint32_t sm;        /* SM count (blocks per unit), 0 until asked */
    _Atomic int64_t calib_until; /* CLOCK_MONOTONIC ns: calibrating (unthrottled) until then; 0 = not */
    _Atomic int calib_asked;    /* the first throttled launch came: the watcher decides on a calibration */
    _Atomic int scheduled;      /* the grant file names the device: paced only while the scheduler is away,
                                 * never with an unthrottled calibration run (docs/hamicore.md) */
    _Atomic unsigned hold;      /* control steps to keep the rate seeded from the scheduler's slices (gate.c) */
    _Atomic uint32_t share_ppm; /* the time share the GPU-time ledger refills at: T / s (ledger.h) */
    _Atomic int64_t launch_ns;  /* the GPU ns a paced launch takes by its events, or the running one's so far
                                 * if longer (pacetime.h); 0 = none seen */
    _Atomic int launch_measured; /* ... and one launch was seen complete */
    _Atomic int said;           /* the log said the device is paced by this library alone */
    uint32_t limit;             /* percent 1..99; 0 = not limited */
    /* the launch gate's, under its device lock: what the node scheduler's slices let through */
    uint64_t sch_units;         /* milli-units since sch_from */
    int64_t sch_from;           /* CLOCK_MONOTONIC ns; 0 = nothing counted yet */
    int64_t sch_rate;           /* milli-units per second over the last whole second counted; 0 = none */
    /* watcher-only state */
    uint64_t seen;              /* `launched` at the previous control step */
    uint64_t ring[LB_CTL_WINDOW]; /* milli-units launched per period, last LB_CTL_WINDOW periods */
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
    unsigned calib_waited;      /* control steps the calibration's decision waited for a launch's time */
};

/* One control step of device d's bucket (every LB_CTL_PERIOD_TICKS refills), on readings from s. */
void lb_ctl_step(int d, struct lb_bucket *b, const struct lb_sensors *s);
/* A new episode (a watcher started): the learned rate stays, the last episode's measurements go. */
void lb_ctl_episode(struct lb_bucket *b);
/* fork: the child's kernels may not be the parent's; it takes the work factor from the region. */
void lb_ctl_after_fork(struct lb_bucket *b);
void lb_ctl_forget_calibration(void);

#endif
