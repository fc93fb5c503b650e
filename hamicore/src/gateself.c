/*
 * A container's own slices while the node scheduler is away (gateself.h).
 *
 * Pacing by NVML's readings, the fallback without a scheduler, does not hold beside other
 * containers (docs/hamicore.md, "Without the scheduler"): a scheduler killed and replaced 3 s later
 * left a 30 % tenant at 0.35 beside its neighbour. A container whose GPU a grant file names keeps
 * to slices of its own instead: its limit's share of the scheduler's period, by CLOCK_REALTIME (the
 * same for every process of the container), at a phase drawn from its grant file (the same for all
 * its processes, another for each container). Neighbours doing the same overlap at times and then
 * share the GPU's time: each gets at most its limit, less while they overlap — fail closed — until
 * the scheduler beats again (the grant word moves: a waiting launcher wakes at once).
 */
#include "gateself.h"

#include <pthread.h>
#include <time.h>

#include "markers.h"
#include "schedclient.h"

#define SELF_PERIOD_NS 100000000LL /* a grant file without a period: the scheduler's default */
#define MARK_POLL_NS 100000LL       /* a launcher waiting for queue room looks again this often */

static int64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ns(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    nanosleep(&ts, NULL);
}

int lb_gate_self_slice(int d, struct slow *sl, uint32_t limit, const _Atomic uint32_t *wp, uint32_t w)
{
    (void)d;
    int64_t period = lb_grant && lb_grant->period_us ? (int64_t)lb_grant->period_us * 1000 : SELF_PERIOD_NS;
    int64_t phase = (int64_t)((lb_grant_ino * 2654435761ULL) % (uint64_t)period);
    int64_t len = period * (int64_t)(limit < 100 ? limit : 100) / 100;
    for (;;) {
        if (atomic_load(wp) != w)
            return 0;
        int64_t in = (wall_ns() + phase) % period;
        if (in >= len) {
            /* Until the container's next slice; the grant word moving (the scheduler is back)
             * wakes it at once. */
            pthread_mutex_unlock(&sl->mu);
            lb_futex_wait(wp, w, period - in);
            pthread_mutex_lock(&sl->mu);
            continue;
        }
        if (sl->no_marks)
            return 1; /* no events: an unbounded queue, as under the scheduler */
        int64_t now = mono_ns();
        lb_gate_poll_markers(sl, now);
        if (lb_mk_room(&sl->mk, len - in)) {
            sl->mk_n = 1; /* every launch here is marked: its marker covers it alone */
            return 1;
        }
        pthread_mutex_unlock(&sl->mu);
        sleep_ns(MARK_POLL_NS);
        pthread_mutex_lock(&sl->mu);
    }
}
