/* The launch gate's per-device state (gatestate.c): what the fast path reads (gate.h inlines it
 * into every launch path) and what the slow path keeps. The gate is three files: gate.c decides a
 * launch (waits for the slice, or paces alone) and records its markers; gatehelper.c
 * (gatehelper.h) is the helper thread that reports drains and releases an idle slice; gatestate.c
 * holds the state both use, and the marker ring's polling and counting. Calls go one way:
 * gate.c -> gatehelper.c -> gatestate.c (internal/ccallgraph holds it). */
#ifndef LB_GATESTATE_H
#define LB_GATESTATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "markers.h"
#include "region.h"

/* Declared hidden: -fvisibility=hidden covers definitions only (charge.h says why it matters). */
#define LB_GATE_HIDDEN __attribute__((visibility("hidden")))

/* What the fast path reads of a device, alone on its cache line. A launch passes when the word
 * `word` points to holds `open` (the grant word under which this process may launch) and a
 * launch of the current batch is left (markers.h); anything else is the slow path's to decide. */
struct lb_gate_fast {
    _Atomic(const _Atomic uint32_t *) word;
    _Atomic uint32_t open;
    _Atomic int32_t left;
} __attribute__((aligned(64)));

extern struct lb_gate_fast lb_gates[LB_REGION_MAX_DEVICES];
/* 1 once a device is limited or scheduled: launches then ask the gate. */
extern int lb_launch_gated;

#define LB_SCHED_DEAD_NS 500000000LL /* a grant word unchanged this long: the scheduler stopped */

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

/* gatestate.c: the marker ring of a device (lock held). */
void lb_gate_poll_markers(struct slow *sl, int64_t now) LB_GATE_HIDDEN;
void lb_gate_count_batch(int d, struct slow *sl, int64_t now) LB_GATE_HIDDEN;

#endif
