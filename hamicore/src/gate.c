/*
 * The launch gate (gate.h). For a device the node's scheduler drives (its GPU is in the grant
 * file), a launch goes while the grant word says RUN (this container's slice) or FREE (not held),
 * and waits while it says WAIT; a launch into a capturing stream never waits (it runs nothing).
 * The process reports, in the container's report file, that it waits (want), that it launches
 * (active, joins of the slice) and, through its helper thread, when its work of a revoked slice
 * has drained (drains, then the bell the scheduler sleeps on). While it holds a slice it keeps
 * little work queued (markers.h), so a revoked slice drains in milliseconds.
 *
 * The scheduler beats every entry every 10 ms. A beat that has not moved for LB_SCHED_DEAD_NS (or
 * an entry the scheduler set OFF) means no scheduler: the device is paced by
 * this process alone (limiter.c), and the log says so; when the word moves again the scheduler
 * takes over. So a scheduler that dies stalls no launch for longer than that, and leaves no slice
 * running unheld for longer than that either (the helper thread watches the word while the
 * process holds a slice).
 *
 * This file decides a launch and records its markers; the helper thread is gatehelper.c, the
 * per-device state both share gatestate.c (gatestate.h).
 */
#include "gate.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "gatehelper.h"
#include "gateself.h"
#include "gatestate.h"
#include "init.h"
#include "limiter.h"
#include "log.h"
#include "markers.h"
#include "reserve.h"
#include "schedclient.h"
#include "symbols.h"

#define WANT_EVERY_NS 10000000LL     /* a waiting launcher bumps want at least this often */
#define WAIT_NS 10000000LL           /* and sleeps on the grant word at most this long at a time */
#define MARK_POLL_NS 100000LL        /* a launcher waiting for queue room looks again this often */

/* The fast path compares *word with open (0). A device the scheduler does not drive points at a
 * word that is always 0 (launches pass; a limited one is paced instead, see below); lb_gate_shut
 * (gatestate.c) is never 0: every launch takes the slow path. */
static const _Atomic uint32_t g_local = 0;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void nap(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

static void shut(int d) { atomic_store_explicit(&lb_gates[d].word, &lb_gate_shut, memory_order_relaxed); }

static void reset(int d)
{
    struct slow *sl = &lb_gate_slow[d];
    pthread_mutex_init(&sl->mu, NULL);
    sl->resolved = 0, sl->entry = -1, sl->mode = M_UNKNOWN, sl->joined = 0, sl->gen = 0, sl->active = 0;
    sl->want_at = 0, sl->mk_ctx = 0, sl->no_marks = 0, sl->slow_launches = 0, sl->quiet_since = 0;
    sl->issued = 0, sl->mk_n = 0, sl->cal_since = 0;
    lb_mk_reset(&sl->mk);
    atomic_store(&lb_gates[d].open, 0);
    atomic_store(&lb_gates[d].left, 0);
    shut(d);
}

void lb_gate_init(void)
{
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++)
        reset(d);
    int scheduled = lb_sched_attach(LB_SCHED_GRANT_PATH, LB_SCHED_REPORT_PATH);
    lb_launch_gated = scheduled || lb_launch_limited;
}

void lb_gate_after_fork(void)
{
    /* The child's launches are its own: it joins slices itself, its helper starts on demand; the
     * parent's events (and contexts) are not the child's. The files stay mapped. */
    lb_gate_helper_after_fork();
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++)
        reset(d);
}

/* The log says once per change which mode a device is in. */
static void say(struct slow *sl, int d, enum mode m, const char *why)
{
    if (sl->mode == m)
        return;
    if (m == M_SCHED) {
        LB_INFO("compute limit: device %d: launches follow the node scheduler's slices", d);
    }
    else if (sl->mode == M_SCHED) {
        lb_limiter_seed(d); /* from the rate its slices let through, not from the start */
        LB_WARN("compute limit: device %d: %s: paced by this library alone until it drives the device again", d, why);
    }
    else
        LB_INFO("compute limit: device %d: %s: paced by this library alone", d, why);
    sl->mode = m;
}

static void resolve(int d, struct slow *sl)
{
    lb_limiter_resolve();
    sl->resolved = 1;
    sl->entry = -1;
    if (lb_grant) {
        __typeof__(&cuDeviceGet) get = LB_REAL(cuDeviceGet);
        __typeof__(&cuDeviceGetUuid) uuid = LB_REAL(cuDeviceGetUuid);
        CUdevice h;
        CUuuid u;
        lb_guard_enter();
        if (get && uuid && get(&h, d) == CUDA_SUCCESS && uuid(&u, h) == CUDA_SUCCESS)
            sl->entry = lb_sched_entry((const uint8_t *)u.bytes);
        lb_guard_leave();
        if (sl->entry < 0)
            say(sl, d, M_SELF, "its GPU is not in the grant file");
        else
            lb_limiter_scheduled(d); /* paced alone only while the scheduler is away: never an
                                      * unthrottled calibration run beside its slices */
    }
    sl->seen = sl->entry >= 0 ? lb_sched_beat(sl->entry) : 0;
    sl->seen_at = now_ns();
    if (sl->entry < 0 && !lb_limiter_limited(d))
        atomic_store(&lb_gates[d].word, &g_local); /* nothing to hold: the fast path passes */
}

static int capturing(CUstream s, int per_thread)
{
    return lb_stream_capturing(per_thread && !s ? CU_STREAM_PER_THREAD : s);
}

/* The pacing's calibration runs unthrottled to measure the GPU at full load; a driver's launch
 * queue would let it queue seconds of work meanwhile (an H200 took 4.6 s of CUDA-graph replays in
 * the 1.5 s), which then ran over the limit for ten seconds and unsettled the pacing when it
 * ended. While it calibrates, launches go in batches sized as a slice's (markers.h), a marker
 * after each, and the first of a batch waits while the queue holds more than the longest bound of
 * a slice: the GPU stays busy (a gap would raise a power-capped GPU's clock and mislead the
 * calibration's full-load figure), the queue stays short. Returns 1 when the launch is to be
 * marked (lock held; it is released while waiting). */
static int calibration_room(int d, struct slow *sl, CUstream s, int per_thread)
{
    if (sl->no_marks || !lb_limiter_calibrating(d) || capturing(s, per_thread))
        return 0;
    if (sl->mk.count && sl->cal_since + 1 < sl->mk.batch) {
        sl->cal_since++;
        return 0;
    }
    for (int64_t now = now_ns();; now = now_ns()) {
        lb_gate_poll_markers(sl, now);
        if (lb_mk_room(&sl->mk, LB_MK_QUEUE_MAX_NS) || !lb_limiter_calibrating(d))
            break;
        pthread_mutex_unlock(&sl->mu);
        nap(MARK_POLL_NS);
        pthread_mutex_lock(&sl->mu);
    }
    sl->mk_n = sl->cal_since + 1; /* the marker after this launch covers it and those since the last */
    sl->cal_since = 0;
    return 1;
}

/* The scheduler does not drive the device (its entry Off, or its beat silent). The grant names its
 * GPU: the container's own slices (gateself.c), never NVML's pacing beside the node's slices; a
 * device without a limit, or a launch into a capturing stream, is not held. Lock held; it is
 * released unless -1 (the grant word moved while it waited: decide again). */
static int away(int d, struct slow *sl, CUstream s, int per_thread, uint64_t kernels, uint64_t blocks, int off, uint32_t w)
{
    say(sl, d, M_SELF, off ? "the node scheduler does not drive it" : "the node scheduler is silent");
    shut(d); /* every launch asks again: the scheduler may come back */
    uint32_t limit = lb_limiter_limit(d);
    if (limit && !capturing(s, per_thread)) {
        if (!lb_gate_self_slice(d, sl, limit, lb_sched_word(sl->entry), w))
            return -1;
        sl->slow_launches++;
        pthread_mutex_unlock(&sl->mu);
        return 1;
    }
    pthread_mutex_unlock(&sl->mu);
    lb_limiter_take(d, kernels, blocks);
    return 0;
}

int lb_gate_enter(int d, CUstream s, int per_thread, uint64_t kernels, uint64_t blocks)
{
    struct slow *sl = &lb_gate_slow[d];
    struct lb_gate_fast *f = &lb_gates[d];
    pthread_mutex_lock(&sl->mu);
    if (!sl->resolved)
        resolve(d, sl);
    if (sl->entry < 0) {
        int mark = calibration_room(d, sl, s, per_thread);
        pthread_mutex_unlock(&sl->mu);
        lb_limiter_take(d, kernels, blocks);
        return mark;
    }
    int e = sl->entry;
    const _Atomic uint32_t *wp = lb_sched_word(e);
    for (;;) {
        uint32_t w = atomic_load_explicit(wp, memory_order_acquire), st = w & LB_GRANT_STATE_MASK, beat = lb_sched_beat(e);
        int64_t now = now_ns();
        if (beat != sl->seen)
            sl->seen = beat, sl->seen_at = now;
        if (st == LB_GRANT_OFF || now - sl->seen_at > LB_SCHED_DEAD_NS) {
            int mark = away(d, sl, s, per_thread, kernels, blocks, st == LB_GRANT_OFF, w);
            if (mark >= 0)
                return mark;
            continue;
        }
        say(sl, d, M_SCHED, "");
        if (beat != sl->active)
            lb_sched_active(e, beat), sl->active = beat;
        if (st == LB_GRANT_RUN || st == LB_GRANT_FREE) {
            uint32_t g = lb_sched_grant_id(e);
            if (sl->joined != g) {
                lb_sched_join(e, g);
                sl->joined = g, sl->gen++, sl->ctx = lb_cur_ctx(), sl->free_join = st == LB_GRANT_FREE;
                sl->budget_us = atomic_load((const _Atomic uint32_t *)&lb_grant->gpu[e].budget_us);
                sl->join_at = sl->quiet_since = now;
                lb_gate_ensure_helper();
            }
            int mark = st == LB_GRANT_RUN && !sl->no_marks;
            while (mark) {
                lb_gate_poll_markers(sl, now);
                if (lb_mk_room(&sl->mk, lb_mk_bound(sl->budget_us, now - sl->join_at)))
                    break;
                pthread_mutex_unlock(&sl->mu);
                nap(MARK_POLL_NS);
                pthread_mutex_lock(&sl->mu);
                now = now_ns();
                if (atomic_load(wp) != w)
                    break; /* the grant changed while the queue drained: decide again */
            }
            if (mark && atomic_load(wp) != w)
                continue;
            uint32_t prev = sl->issued;
            lb_gate_count_batch(d, sl, now);
            atomic_store_explicit(&f->open, w, memory_order_relaxed);
            if (mark)
                sl->mk_n = prev, sl->issued = sl->mk.batch, sl->batch_k = kernels, sl->batch_b = blocks;
            atomic_store_explicit(&f->left, mark ? (int32_t)sl->mk.batch : INT32_MAX, memory_order_relaxed);
            atomic_store_explicit(&f->word, wp, memory_order_relaxed);
            sl->slow_launches++;
            pthread_mutex_unlock(&sl->mu);
            return mark;
        }
        /* Another container's turn. A launch into a capturing stream runs nothing: it goes. */
        if (capturing(s, per_thread)) {
            pthread_mutex_unlock(&sl->mu);
            return 0;
        }
        if (now - sl->want_at >= WANT_EVERY_NS)
            lb_sched_want(e), sl->want_at = now;
        pthread_mutex_unlock(&sl->mu);
        lb_futex_wait(wp, w, WAIT_NS);
        pthread_mutex_lock(&sl->mu);
    }
}

CUresult lb_gate_beyond(void)
{
    static _Atomic int said;
    if (!atomic_exchange(&said, 1))
        LB_ERROR("compute limit: CUDA device %d: past the %d devices whose launches this library can hold: its launches "
                 "are refused (CUDA_ERROR_NOT_PERMITTED); make at most %d GPUs visible to the container",
                 lb_tls_dev.ord, LB_CTX_MAX_ORD, LB_CTX_MAX_ORD);
    return CUDA_ERROR_NOT_PERMITTED;
}

void lb_gate_after(int d, CUstream s, int per_thread)
{
    struct slow *sl = &lb_gate_slow[d];
    __typeof__(&cuEventCreate) create = LB_REAL(cuEventCreate);
    __typeof__(&cuEventRecord) record = LB_REAL(cuEventRecord);
    if (!create || !record)
        return;
    CUstream stream = per_thread && !s ? CU_STREAM_PER_THREAD : s;
    pthread_mutex_lock(&sl->mu);
    uintptr_t ctx = lb_cur_ctx();
    if (sl->no_marks || (sl->mk_ctx != ctx && sl->mk.count)) {
        pthread_mutex_unlock(&sl->mu); /* markers of another context in flight: this batch goes unmarked */
        return;
    }
    if (sl->mk_ctx != ctx) {
        lb_mk_reset(&sl->mk); /* the spare events are another context's */
        sl->mk_ctx = ctx, sl->mk_n = 0;
    }
    CUevent ev = (CUevent)lb_mk_spare(&sl->mk);
    lb_guard_enter();
    if (!ev && create(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
        lb_guard_leave();
        sl->no_marks = 1;
        LB_WARN("compute limit: device %d: cannot create events: the work queued in a slice is not bounded", d);
        pthread_mutex_unlock(&sl->mu);
        return;
    }
    CUresult r = record(ev, stream);
    lb_guard_leave();
    /* It covers the launches of the last batch after its first (its marker's) and this one. */
    uint32_t n = sl->mk_n ? sl->mk_n : 1;
    if (r == CUDA_SUCCESS)
        lb_mk_push(&sl->mk, ev, now_ns(), n);
    else if (sl->mk.nspare < LB_MK_RING)
        sl->mk.spare[sl->mk.nspare++] = ev;
    pthread_mutex_unlock(&sl->mu);
}
