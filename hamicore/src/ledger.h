/* The fallback pacing's GPU-time ledger (ledger.c): without the node scheduler, every paced launch
 * is followed by an event, and the GPU time each launch took, measured from the events'
 * completions, is charged to a budget that refills at the device's limit (docs/hamicore.md,
 * "Without the scheduler"). The NVML loop (controller.c) paces short kernels on the device's
 * readings; this ledger holds what those cannot see: a kernel longer than a reading's window,
 * which a rate of launches cannot hold (a 1 s kernel under a 30 % limit ran the GPU busy 1.0).
 * Pure: the caller (pacetime.c) records and polls the events and passes in what they said and when. */
#ifndef LB_LEDGER_H
#define LB_LEDGER_H

#include <stdint.h>

#define LB_LG_RING 64                  /* paced launches in flight, each followed by its event */
#define LB_LG_QUEUE_NS 50000000LL      /* a launch waits while the work queued would take longer (markers.h's longest bound) */
#define LB_LG_FREE_NS 50000000LL       /* a launch's first 50 ms are not charged (the NVML loop's) ... */
#define LB_LG_WHOLE_NS (2 * LB_LG_FREE_NS) /* ... one of 100 ms or more is charged all its time */
#define LB_LG_CAP_NS 100000000LL       /* credit saved up while idle, at most */
#define LB_LG_UNTIMED_NS 1000000000LL  /* what a launch costs that no event can time (fail closed) */

struct lb_lg_mark {
    void *ev;       /* the event recorded after the launch (CUevent), owned by the ledger's user */
    uintptr_t ctx;  /* the context it belongs to */
    int64_t at;     /* when it was recorded (CLOCK_MONOTONIC ns) */
};

struct lb_lg_spare {
    void *ev;
    uintptr_t ctx;
};

struct lb_ledger {
    struct lb_lg_mark ring[LB_LG_RING];
    struct lb_lg_spare spare[LB_LG_RING]; /* events not in flight, each of its context */
    unsigned head, count, nspare;
    int64_t last_done;   /* when the last launch was seen complete */
    double per_launch;   /* GPU ns a launch takes, smoothed; 0 until measured */
    int64_t balance;     /* GPU ns the process may still use; < 0: what it owes */
    int64_t credit_at;   /* when credit was last added; 0: never (the first credit fills the cap) */
    uint32_t share_ppm;  /* the rate credit is earned at: millionths of the device's time */
};

void lb_lg_reset(struct lb_ledger *l);
/* Credit earned since the last call, at share_ppm, up to the cap (kept for the time the launch
 * still running will be charged). Every charge and launch credits first, so idle time is credited
 * only up to the cap, whoever looks when. */
void lb_lg_credit(struct lb_ledger *l, int64_t now);
/* What a launch of g GPU ns is charged: nothing for its first LB_LG_FREE_NS, all of it from
 * LB_LG_WHOLE_NS, a ramp between (no kernel length is a cliff). */
int64_t lb_lg_charge(int64_t g);
/* The oldest launch was seen complete at now: it is charged its time, its event is spare. */
void lb_lg_done(struct lb_ledger *l, int64_t now);
/* The oldest launch was seen still running at now: it has taken at least that long. */
void lb_lg_pending(struct lb_ledger *l, int64_t now);
/* The charge the oldest launch has earned by now, still running (0 when none is in flight). */
int64_t lb_lg_running(const struct lb_ledger *l, int64_t now);
/* May a launch go now? Credit left after the running launch's time so far, and room in the queue:
 * none queued, or (once a launch was measured) the queued launches' time within LB_LG_QUEUE_NS;
 * unmeasured, one at a time, so a second long kernel is not queued behind the first. */
int lb_lg_room(const struct lb_ledger *l, int64_t now);
/* A launch was followed by event ev of context ctx at now; 0: the ring is full (not taken). */
int lb_lg_push(struct lb_ledger *l, void *ev, uintptr_t ctx, int64_t now);
/* A launch that no event can time, made at now: charged LB_LG_UNTIMED_NS. */
void lb_lg_untimed(struct lb_ledger *l, int64_t now);
/* A spare event of context ctx, or NULL (the caller makes one); put_spare gives one back (one
 * that cannot be kept is dropped, never destroyed: its context may be gone). */
void *lb_lg_spare(struct lb_ledger *l, uintptr_t ctx);
void lb_lg_put_spare(struct lb_ledger *l, void *ev, uintptr_t ctx);
/* The GPU ns a launch takes by now: the estimate, or the running launch's time if longer; 0
 * until one was measured. */
int64_t lb_lg_launch_ns(const struct lb_ledger *l, int64_t now);

#endif
