/* The fallback pacing's timing (pacetime.h): every launch the pacing lets through (limiter.c) is
 * followed by an event in its stream, and each device's ledger (ledger.h) charges the GPU time
 * the launches took, as the events complete. The launchers look at the events while they wait,
 * the watcher thread every 10 ms, so a completion is seen within a few ms of it. What cannot be
 * timed is charged as the longest it could be: a launch still running counts its time so far, a
 * launch whose event cannot be made or recorded costs LB_LG_UNTIMED_NS (logged once), and an
 * event that cannot be queried counts as complete when it is looked at (its context is gone). */
#include "pacetime.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "ctxcache.h"
#include "guard.h"
#include "ledger.h"
#include "log.h"
#include "region.h"
#include "reserve.h"
#include "symbols.h"

struct pace {
    pthread_mutex_t mu;
    struct lb_ledger lg;
    _Atomic int waiters; /* launchers waiting for the ledger */
    int untimed_said;
};

static struct pace g_pace[LB_REGION_MAX_DEVICES];
/* 1 + the device whose paced launch this thread is making (lb_pace_taken); 0 none. */
static _Thread_local int t_paced __attribute__((tls_model("initial-exec")));

void lb_pace_reset(void)
{
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++) {
        pthread_mutex_init(&g_pace[d].mu, NULL); /* in a fork child, a parent's thread may have held it */
        lb_lg_reset(&g_pace[d].lg);
        atomic_store(&g_pace[d].waiters, 0);
        g_pace[d].untimed_said = 0;
    }
    t_paced = 0;
}

void lb_pace_taken(int dev) { t_paced = dev + 1; }

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Charges the launches seen complete by now (lock held). */
static void poll(struct pace *p, int64_t now)
{
    __typeof__(&cuEventQuery) query = LB_REAL(cuEventQuery);
    while (p->lg.count) {
        CUresult r = query ? query((CUevent)p->lg.ring[p->lg.head].ev) : CUDA_SUCCESS;
        if (r == CUDA_ERROR_NOT_READY) {
            lb_lg_pending(&p->lg, now);
            return;
        }
        lb_lg_done(&p->lg, now); /* an error (its context is gone) counts as complete now */
    }
}

/* An event recorded into stream s after the launch (lock held), or 0: a spare of the current
 * context first, then a new one (a spare whose context was destroyed and replaced fails). */
static int record(struct pace *p, CUstream s, uintptr_t ctx, int64_t now)
{
    __typeof__(&cuEventCreate) create = LB_REAL(cuEventCreate);
    __typeof__(&cuEventRecord) rec = LB_REAL(cuEventRecord);
    if (!create || !rec || p->lg.count >= LB_LG_RING)
        return 0;
    CUevent ev = (CUevent)lb_lg_spare(&p->lg, ctx);
    if (ev && rec(ev, s) == CUDA_SUCCESS)
        return lb_lg_push(&p->lg, ev, ctx, now);
    if (create(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        return 0;
    if (rec(ev, s) == CUDA_SUCCESS)
        return lb_lg_push(&p->lg, ev, ctx, now);
    lb_lg_put_spare(&p->lg, ev, ctx);
    return 0;
}

void lb_pace_launched(int dev, CUstream s, int per_thread, CUresult r)
{
    if (t_paced != dev + 1)
        return;
    t_paced = 0;
    if (r != CUDA_SUCCESS)
        return; /* not made */
    CUstream stream = per_thread && !s ? CU_STREAM_PER_THREAD : s;
    lb_guard_enter();
    int captured = lb_stream_capturing(stream);
    lb_guard_leave();
    if (captured)
        return; /* it runs nothing now; the graph made of it is timed at each launch */
    struct pace *p = &g_pace[dev];
    uintptr_t ctx = lb_cur_ctx();
    lb_lock(&p->mu);
    int64_t now = now_ns();
    if (!record(p, stream, ctx, now)) {
        lb_lg_untimed(&p->lg, now);
        if (!p->untimed_said) {
            p->untimed_said = 1;
            LB_WARN("compute limit: device %d: cannot follow a launch with an event (events fail, or %d launches are "
                    "in flight): each launch that cannot be timed is charged %lld ms of GPU time",
                    dev, LB_LG_RING, (long long)(LB_LG_UNTIMED_NS / 1000000));
        }
    }
    lb_unlock(&p->mu);
}

int lb_pace_may(int dev, uint32_t share_ppm, int64_t now)
{
    struct pace *p = &g_pace[dev];
    lb_lock(&p->mu);
    poll(p, now);
    p->lg.share_ppm = share_ppm;
    lb_lg_credit(&p->lg, now);
    int ok = lb_lg_room(&p->lg, now);
    lb_unlock(&p->mu);
    return ok;
}

int64_t lb_pace_poll(int dev, int64_t now, int *busy, int *measured)
{
    struct pace *p = &g_pace[dev];
    lb_lock(&p->mu);
    poll(p, now);
    int64_t g = lb_lg_launch_ns(&p->lg, now);
    *busy = p->lg.count || atomic_load(&p->waiters);
    *measured = p->lg.per_launch > 0;
    lb_unlock(&p->mu);
    return g;
}

void lb_pace_waiting(int dev, int delta) { atomic_fetch_add(&g_pace[dev].waiters, delta); }
