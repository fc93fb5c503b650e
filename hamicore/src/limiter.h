/* The compute limit's entry points: the fallback pacing (limiter.c), the graphs' work
 * (graphwork.c) and the marking the node monitor reads. The launch gate (gate.h) decides which
 * launches the pacing sees. */
#ifndef LB_LIMITER_H
#define LB_LIMITER_H

#include <stdatomic.h>
#include <stdint.h>

#include "region.h"
#include "symbols.h"

/* Set once at initialization: 1 if some device has a compute limit (1..99 %) and the policy is
 * not "disable". With no node scheduler either, 0 keeps every launch on the pass-through path
 * (no watcher thread either). */
extern int lb_launch_limited;

/* At initialization: the pacing's buckets (init.c starts the gate after them: gate.h). */
void lb_limiter_init(void);
void lb_limiter_after_fork(void);
/* Resolves every CUDA ordinal's limit from its physical GPU's (devmap.h), once, at the first
 * gated launch (the gate calls it before it asks lb_limiter_limited or takes). */
void lb_limiter_resolve(void);
/* 1 if device dev (a CUDA ordinal) is paced when no scheduler drives it. */
int lb_limiter_limited(int dev);
/* Its limit in percent (1..99), 0 when it is not paced. */
uint32_t lb_limiter_limit(int dev);
/* 1 while device dev runs its unthrottled calibration (controller.c): the gate bounds the work
 * it queues meanwhile. */
int lb_limiter_calibrating(int dev);
/* The grant file names device dev (the node scheduler drives it): its pacing, whenever the
 * scheduler is away, runs without an unthrottled calibration run. */
void lb_limiter_scheduled(int dev);
/* While the node scheduler drives device dev (the gate, under its device lock): `launches`
 * launches, each of the units of `kernels` kernels of `blocks` blocks, went under its slices by
 * now (CLOCK_MONOTONIC ns). The pacing is seeded from their rate when the scheduler goes away
 * (lb_limiter_seed): the rate that held the limit under the slices, not the pacing's starting
 * rate, which for a mix of large grids is a few percent of the GPU (a scheduler restart's
 * half second cost a 50 % shape mix 0.26 of that second). The seed is kept for one control
 * window, then the loop takes over from its readings. */
void lb_limiter_count_scheduled(int dev, uint64_t launches, uint64_t kernels, uint64_t blocks, int64_t now);
void lb_limiter_seed(int dev);
/* Wait until device dev may start `kernels` kernels of `blocks` thread blocks in all (a launch:
 * 1 and its grid; a graph: its kernel nodes), then charge them. */
void lb_limiter_take(int dev, uint64_t kernels, uint64_t blocks);

/* Graphs (graphwork.c): count an executable graph's kernel work when it is instantiated or
 * updated, forget it when destroyed, and charge it at each launch. */
void lb_graph_work_note(CUgraphExec x, CUgraph g);
void lb_graph_work_forget(CUgraphExec x);
/* A graph launch into stream s (per_thread: cuGraphLaunch_ptsz) asks the gate; what it returns
 * goes to lb_graph_launched with the launch's result, which records the batch's marker (gate.h)
 * after it and returns the result; -1: the launch is refused (lb_gate_beyond), not made. */
int lb_graph_launch_throttle(CUgraphExec x, CUstream s, int per_thread);
CUresult lb_graph_launched(int mark, CUresult r, CUstream s, int per_thread);

void lb_mark_launch_slow(void);
/* Tell the node monitor that this container launched kernels (the `default` policy needs it
 * from every container). A shared word that is already 1 is only read. */
static inline void lb_mark_launch(void)
{
    struct lb_region_header *h = lb_region;
    if (__builtin_expect(h && !atomic_load_explicit(&h->recent_kernel, memory_order_relaxed), 0))
        lb_mark_launch_slow();
}

#endif
