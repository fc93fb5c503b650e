/* The launch gate's slow path, shared by its three files (gate.h is the launch path's view):
 * gate.c decides a launch (waits for the slice, or paces alone) and records its markers;
 * gatehelper.c is the helper thread that reports drains and releases an idle slice;
 * gatestate.c holds the per-device state both use, and the marker ring's polling and counting.
 * Calls go one way: gate.c -> gatehelper.c -> gatestate.c (internal/ccallgraph holds it). */
#ifndef LB_GATESLOW_H
#define LB_GATESLOW_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "gate.h"
#include "markers.h"

/* Declared hidden: -fvisibility=hidden covers definitions only (charge.h says why it matters). */
#define LB_GATE_HIDDEN __attribute__((visibility("hidden")))

#define LB_SCHED_DEAD_NS 500000000LL /* a grant word unchanged this long: the scheduler stopped */
#define WANT_EVERY_NS 10000000LL     /* a waiting launcher bumps want at least this often */
#define WAIT_NS 10000000LL           /* and sleeps on the grant word at most this long at a time */
#define IDLE_NS 2000000LL            /* a holder with nothing launched or queued this long releases */
#define TICK_NS 1000000LL            /* the helper's step while the process holds a slice */
#define FREE_TICK_NS 20000000LL      /* ... while it only runs free (the launcher sees a revoke itself) */
#define MARK_POLL_NS 100000LL        /* a launcher waiting for queue room looks again this often */

enum mode { M_UNKNOWN, M_SCHED, M_SELF };

struct slow {
    pthread_mutex_t mu;
    int resolved, entry;     /* the device's grant entry, -1: not scheduled */
    enum mode mode;          /* what the log said last */
    uint32_t seen;           /* the beat last seen ... */
    int64_t seen_at;         /* ... since then (CLOCK_MONOTONIC ns) */
    uint32_t joined;         /* the slice this process joined, 0 none */
    uint32_t budget_us;      /* its planned length (the queue bound follows what is left, markers.h) */
    int64_t join_at;         /* when it joined */
    uint32_t gen;            /* joins so far (a drain reported for an older join does not end a newer one) */
    int free_join;           /* it joined a FREE grant: no markers, no idle release */
    uintptr_t ctx;           /* the context its launches of the slice used (the drain synchronises it) */
    uint32_t active;         /* the beat last reported active */
    int64_t want_at;
    struct lb_markers mk;
    uint32_t issued;         /* the launches the last batch let through (its first included) */
    uint64_t batch_k, batch_b; /* its first launch's kernels and blocks: what its launches are counted as */
    uint32_t mk_n;           /* ... and the one before it: what the next marker covers */
    uintptr_t mk_ctx;        /* the context of the markers' events */
    int no_marks;            /* events failed: no queue bound (logged once) */
    uint32_t cal_since;      /* a calibration's launches since its last marker (calibration_room) */
    uint32_t slow_launches;  /* launches through here (the helper's idle test) */
    int32_t seen_left;
    uint32_t seen_slow;
    int64_t quiet_since;
};

extern struct slow lb_gate_slow[LB_REGION_MAX_DEVICES] LB_GATE_HIDDEN;
/* Never 0: a device's word pointing at it sends every launch to the slow path (gate.c). */
extern const _Atomic uint32_t lb_gate_shut LB_GATE_HIDDEN;

static inline int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void nap(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

static inline void shut(int d) { atomic_store_explicit(&lb_gates[d].word, &lb_gate_shut, memory_order_relaxed); }

/* gatestate.c: the marker ring of a device (lock held). */
void lb_gate_poll_markers(struct slow *sl, int64_t now) LB_GATE_HIDDEN;
void lb_gate_count_batch(int d, struct slow *sl, int64_t now) LB_GATE_HIDDEN;

/* gatehelper.c: the helper thread, started (or woken) when the process joins a slice. */
void lb_gate_ensure_helper(void) LB_GATE_HIDDEN;
/* In a forked child: no helper runs there yet. */
void lb_gate_helper_after_fork(void) LB_GATE_HIDDEN;

#endif
