/* The bound on a process's launched-but-unfinished work while it holds a slice (markers.c): an
 * event ("marker") is recorded after every batch of launches; a launch waits while the batches
 * still queued would take more than the bound. The bound is what is left of the slice's planned
 * length (4..50 ms): deep early in a slice, so a launcher the CPU does not run for tens of ms
 * (a loaded node) leaves the GPU busy meanwhile, and shallow at its end, so a revoked slice
 * drains in a few ms, not in the up to a second of work a driver's launch queue holds. A slice
 * without a planned end (unthrottled, taking turns) keeps 16 ms.
 * Pure: the gate (gate.c) polls the events and passes in what they said and when. */
#ifndef LB_MARKERS_H
#define LB_MARKERS_H

#include <stdint.h>

#define LB_MK_RING 8                   /* markers in flight at most */
#define LB_MK_BATCH_NS 1000000LL       /* a batch: about a quarter of the bound, at least this ... */
#define LB_MK_QUEUE_MIN_NS 4000000LL   /* ... and the queue bound: at least this ... */
#define LB_MK_QUEUE_MAX_NS 50000000LL  /* ... at most this ... */
#define LB_MK_QUEUE_OPEN_NS 16000000LL /* ... and this in a slice without a planned end */
#define LB_MK_BATCH_MAX 4096

struct lb_marker {
    void *ev;       /* the event (CUevent), owned by the gate */
    int64_t at;     /* when it was recorded (CLOCK_MONOTONIC ns) */
    uint32_t n;     /* the launches since the marker before it (0: none, it teaches nothing) */
};

struct lb_markers {
    struct lb_marker ring[LB_MK_RING];
    void *spare[LB_MK_RING]; /* events not in flight */
    unsigned head, count, nspare;
    double per_launch;       /* GPU ns a launch takes, smoothed; 0 until measured */
    int64_t last_done;       /* when the last marker was seen complete */
    uint32_t batch;          /* launches per marker now (lb_mk_room sizes it) */
    int grown;               /* the batch grew since the last measurement */
};

void lb_mk_reset(struct lb_markers *m);
/* The queue bound elapsed_ns into a slice planned to last budget_us (0: until revoked). */
int64_t lb_mk_bound(uint32_t budget_us, int64_t elapsed_ns);
/* May one more batch be launched now, within bound ns queued? (the completions seen so far are
 * applied) It sizes the next batch to the bound. */
int lb_mk_room(struct lb_markers *m, int64_t bound);
/* The oldest marker was seen complete at now: learn from it, free its event. */
void lb_mk_done(struct lb_markers *m, int64_t now);
/* The oldest marker was seen not yet complete at now: what it covers has taken at least that
 * long, which bounds the cost of a launch from below at once (markers.c). */
void lb_mk_pending(struct lb_markers *m, int64_t now);
/* A marker was recorded after n launches since the last one. */
void lb_mk_push(struct lb_markers *m, void *ev, int64_t now, uint32_t n);
/* The event to record the next marker with (a spare), or NULL: the caller makes one. */
void *lb_mk_spare(struct lb_markers *m);

#endif
