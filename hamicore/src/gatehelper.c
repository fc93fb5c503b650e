/* The launch gate's helper thread (gatehelper.h): while the process holds a slice it watches the
 * grant word, reports when the slice's work has drained (revoked, or idle: released) and finds a
 * silent scheduler; it is started, or woken, when a launcher joins a slice (gate.c). */
#include "gatehelper.h"

#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "guard.h"
#include "limiter.h"
#include "log.h"
#include "schedclient.h"
#include "symbols.h"

#define IDLE_NS 2000000LL            /* a holder with nothing launched or queued this long releases */
#define TICK_NS 1000000LL            /* the helper's step while the process holds a slice */
#define FREE_TICK_NS 20000000LL      /* ... while it only runs free (the launcher sees a revoke itself) */

static _Atomic int g_helper;     /* 0 none, 1 running (or starting) */
static _Atomic uint32_t g_kick;  /* the helper sleeps on it when nothing is held (process-private) */

static void *helper(void *arg);

/* The gate's own clock, sleep and shutter, as gate.c has them. */
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

void lb_gate_ensure_helper(void)
{
    int zero = 0;
    if (atomic_load_explicit(&g_helper, memory_order_relaxed) || !atomic_compare_exchange_strong(&g_helper, &zero, 1)) {
        atomic_fetch_add(&g_kick, 1);
        syscall(SYS_futex, &g_kick, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        return;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the application's signals are never ours */
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 256 * 1024);
    pthread_t t;
    int r = pthread_create(&t, &a, helper, NULL);
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        atomic_store(&g_helper, 0);
        /* Without it drains are not reported: the scheduler charges this container its drain
         * waits (DrainWait each), never another's time. */
        LB_ERROR("compute limit: cannot start the scheduler client thread (error %d): drains are not reported", r);
    }
}

void lb_gate_helper_after_fork(void) { atomic_store(&g_helper, 0); }

/* The work of the slice the process joined has finished on the GPU: waits for it (lock held;
 * released meanwhile), reports the drain. */
static void drain(int d, struct slow *sl)
{
    uint32_t g = sl->joined, gen = sl->gen, launches = sl->slow_launches;
    uintptr_t ctx = sl->ctx;
    shut(d); /* every launch from here takes the slow path: counted in slow_launches */
    pthread_mutex_unlock(&sl->mu);
    __typeof__(&cuCtxGetCurrent) cur = LB_REAL(cuCtxGetCurrent);
    __typeof__(&cuCtxSetCurrent) set = LB_REAL(cuCtxSetCurrent);
    __typeof__(&cuCtxSynchronize) sync = LB_REAL(cuCtxSynchronize);
    CUcontext old = NULL;
    if (cur && set && sync && ctx && cur(&old) == CUDA_SUCCESS) {
        if (set((CUcontext)ctx) == CUDA_SUCCESS)
            (void)sync(); /* an error (the context is gone): nothing of it runs any more */
        (void)set(old);
    }
    int64_t now = now_ns();
    pthread_mutex_lock(&sl->mu);
    if (sl->gen == gen && sl->slow_launches != launches)
        return; /* it launched under the slice while this waited (the grant still said RUN): that
                 * work runs, so the slice has not drained; the next tick looks again */
    lb_sched_drained(sl->entry, g);
    if (sl->gen == gen)
        sl->joined = 0;
    while (sl->mk.count)
        lb_mk_done(&sl->mk, now); /* everything before the synchronisation has run */
    lb_gate_count_batch(d, sl, now); /* and the next slice's first marker covers its own launch only */
}

/* One step of a held device (lock held). */
static void tick(int d, struct slow *sl, int64_t now)
{
    const _Atomic uint32_t *wp = lb_sched_word(sl->entry);
    uint32_t w = atomic_load_explicit(wp, memory_order_acquire), st = w & LB_GRANT_STATE_MASK, beat = lb_sched_beat(sl->entry);
    if (beat != sl->seen)
        sl->seen = beat, sl->seen_at = now;
    if (now - sl->seen_at > LB_SCHED_DEAD_NS) {
        shut(d); /* the launchers find the scheduler gone and pace alone */
        return;
    }
    if ((st != LB_GRANT_RUN && st != LB_GRANT_FREE) || lb_sched_grant_id(sl->entry) != sl->joined) {
        drain(d, sl);
        return;
    }
    /* Launches since the last step: the container is busy (its neighbours' `default` policy
     * reads it); the launch path itself never writes it while the slice is held. */
    int32_t left = atomic_load_explicit(&lb_gates[d].left, memory_order_relaxed);
    int launched = left != sl->seen_left || sl->slow_launches != sl->seen_slow;
    if (launched) {
        sl->seen_left = left, sl->seen_slow = sl->slow_launches, sl->quiet_since = now;
        if (beat != sl->active)
            lb_sched_active(sl->entry, beat), sl->active = beat;
        lb_mark_launch(); /* the node monitor's view: the launch path skips it while the gate is open */
    }
    if (sl->free_join)
        return;
    unsigned queued = sl->mk.count;
    lb_gate_poll_markers(sl, now);
    if (sl->mk.count < queued)
        sl->quiet_since = now; /* idle is measured from when its queue ran dry, not from its last
                                * launch: a synchronisation after a burst is not idleness */
    if (!launched && !sl->mk.count && now - sl->quiet_since >= IDLE_NS)
        drain(d, sl); /* idle: its slice can go to another container */
}

static void *helper(void *arg)
{
    (void)arg;
    lb_guard_enter(); /* our own driver calls pass straight through our wrappers */
    /* Relaxed capture mode: the drain's synchronisation must not disturb another thread's
     * capture (a global-mode capture forbids unsafe calls in every thread). */
    __typeof__(&cuThreadExchangeStreamCaptureMode) xmode = LB_REAL(cuThreadExchangeStreamCaptureMode);
    CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (xmode)
        (void)xmode(&relaxed);
    for (;;) {
        int held = 0, one = -1, free_only = 1;
        /* Read before the scan: a launcher that joins during it (after its device was looked at)
         * kicks, and the wait below returns at once instead of sleeping through its slice. */
        uint32_t kick = atomic_load(&g_kick);
        int64_t now = now_ns();
        for (int d = 0; d < LB_REGION_MAX_DEVICES; d++) {
            struct slow *sl = &lb_gate_slow[d];
            pthread_mutex_lock(&sl->mu);
            if (sl->entry >= 0 && sl->joined) {
                tick(d, sl, now);
                if (sl->joined)
                    held++, one = d, free_only &= sl->free_join;
            }
            pthread_mutex_unlock(&sl->mu);
        }
        if (!held) {
            struct timespec ts = {1, 0};
            syscall(SYS_futex, &g_kick, FUTEX_WAIT_PRIVATE, kick, &ts, NULL, 0);
        } else if (held == 1) {
            pthread_mutex_lock(&lb_gate_slow[one].mu);
            int e = lb_gate_slow[one].entry;
            pthread_mutex_unlock(&lb_gate_slow[one].mu);
            const _Atomic uint32_t *wp = lb_sched_word(e);
            lb_futex_wait(wp, atomic_load(wp), free_only ? FREE_TICK_NS : TICK_NS);
        } else {
            nap(TICK_NS);
        }
    }
    return NULL;
}
