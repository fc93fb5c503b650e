/* The fallback pacing's GPU-time ledger (ledger.h). Each paced launch is followed by an event; the
 * launches complete in order as the events say, and a launch's GPU time is from the later of its
 * event's record and the previous launch's completion to its own completion, as seen (markers.c
 * times a batch the same way). That time fails closed: it holds the time the GPU gave a
 * neighbour's work between two of ours, and the time until we looked. So a launch's first
 * LB_LG_FREE_NS are not charged at all: a kernel of a few ms beside a busy neighbour takes twice
 * its time, and the NVML loop, on per-process readings, paces kernels that short (it held 50 and
 * 100 ms kernels at 0.298 and 0.291 of a 30 % limit before this ledger). Its long kernels it
 * cannot: a unit of launch rate is at least a kernel a second. What cannot be timed fails closed
 * too: a launch still running counts its time so far, and one no event can follow costs
 * LB_LG_UNTIMED_NS. */
#include "ledger.h"

#include <string.h>

#define BALANCE_MIN (-(INT64_MAX / 4)) /* what any number of untimed launches can owe */

void lb_lg_reset(struct lb_ledger *l) { memset(l, 0, sizeof *l); }

void lb_lg_credit(struct lb_ledger *l, int64_t now)
{
    if (!l->credit_at) {
        l->balance = LB_LG_CAP_NS, l->credit_at = now;
        return;
    }
    int64_t us = (now - l->credit_at) / 1000; /* whole µs: the rest is credited next time */
    if (us <= 0)
        return;
    l->credit_at += us * 1000;
    l->balance += us * (int64_t)l->share_ppm / 1000; /* µs x ppm / 1000 = ns; no overflow for years */
    /* Saved up while idle, at most the cap: the credit earned while a launch runs is kept for the
     * time it will be charged. */
    int64_t cap = LB_LG_CAP_NS + lb_lg_running(l, now);
    if (l->balance > cap)
        l->balance = cap;
}

int64_t lb_lg_charge(int64_t g)
{
    if (g <= LB_LG_FREE_NS)
        return 0;
    if (g >= LB_LG_WHOLE_NS)
        return g;
    return 2 * (g - LB_LG_FREE_NS); /* 0 at LB_LG_FREE_NS, g at LB_LG_WHOLE_NS */
}

/* The time the oldest launch in flight has taken by now: it was made by its record and ran after
 * the previous launch was seen complete. */
static int64_t run_of(const struct lb_ledger *l, int64_t now)
{
    const struct lb_lg_mark *k = &l->ring[l->head];
    int64_t from = k->at > l->last_done ? k->at : l->last_done;
    return now > from ? now - from : 0;
}

static void owe(struct lb_ledger *l, int64_t ns)
{
    l->balance = l->balance - ns < BALANCE_MIN ? BALANCE_MIN : l->balance - ns;
}

void lb_lg_done(struct lb_ledger *l, int64_t now)
{
    if (!l->count)
        return;
    lb_lg_credit(l, now); /* up to its completion first: the idle credit before it stays capped */
    struct lb_lg_mark *k = &l->ring[l->head];
    int64_t g = run_of(l, now);
    owe(l, lb_lg_charge(g));
    /* Smoothed as markers.c does; launches seen complete together (after a late look) take the
     * time of the first, and their zeros bring the estimate back to the mean. */
    if (l->per_launch > 0)
        l->per_launch += ((double)g - l->per_launch) / 4;
    else if (g > 0)
        l->per_launch = (double)g;
    if (l->per_launch > 0 && l->per_launch < 1)
        l->per_launch = 1; /* measured stays measured */
    l->last_done = now;
    lb_lg_put_spare(l, k->ev, k->ctx);
    l->head = (l->head + 1) % LB_LG_RING;
    l->count--;
}

void lb_lg_pending(struct lb_ledger *l, int64_t now)
{
    if (!l->count || l->per_launch <= 0)
        return; /* unmeasured: one at a time anyway */
    double least = (double)run_of(l, now);
    if (least > l->per_launch)
        l->per_launch = least;
}

int64_t lb_lg_running(const struct lb_ledger *l, int64_t now) { return l->count ? lb_lg_charge(run_of(l, now)) : 0; }

int lb_lg_room(const struct lb_ledger *l, int64_t now)
{
    if (l->balance - lb_lg_running(l, now) <= 0)
        return 0;
    if (!l->count)
        return 1;
    /* Half the ring: launchers that passed here together each find a place for their event. */
    if (l->count >= LB_LG_RING / 2 || l->per_launch <= 0)
        return 0;
    return l->per_launch * (l->count + 1) <= (double)LB_LG_QUEUE_NS;
}

int lb_lg_push(struct lb_ledger *l, void *ev, uintptr_t ctx, int64_t now)
{
    if (l->count >= LB_LG_RING)
        return 0;
    lb_lg_credit(l, now); /* the credit saved up before it is capped before it runs */
    l->ring[(l->head + l->count) % LB_LG_RING] = (struct lb_lg_mark){ev, ctx, now};
    l->count++;
    return 1;
}

void lb_lg_untimed(struct lb_ledger *l, int64_t now)
{
    lb_lg_credit(l, now);
    owe(l, LB_LG_UNTIMED_NS);
}

void *lb_lg_spare(struct lb_ledger *l, uintptr_t ctx)
{
    for (unsigned i = l->nspare; i-- > 0;)
        if (l->spare[i].ctx == ctx) {
            void *ev = l->spare[i].ev;
            l->spare[i] = l->spare[--l->nspare];
            return ev;
        }
    return NULL;
}

void lb_lg_put_spare(struct lb_ledger *l, void *ev, uintptr_t ctx)
{
    if (l->nspare < LB_LG_RING)
        l->spare[l->nspare++] = (struct lb_lg_spare){ev, ctx};
}

int64_t lb_lg_launch_ns(const struct lb_ledger *l, int64_t now)
{
    int64_t g = (int64_t)l->per_launch, r = l->count ? run_of(l, now) : 0;
    return r > g ? r : g;
}
