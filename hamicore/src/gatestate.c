/* The launch gate's per-device state (gatestate.h): defined here, apart from gate.c and
 * gatehelper.c, so that both use it and neither calls back into the other; and the two steps of a
 * device's marker ring that both take: polling the completed markers, counting the last batch. */
#include "gatestate.h"

#include "guard.h"
#include "limiter.h"
#include "symbols.h"

struct lb_gate_fast lb_gates[LB_REGION_MAX_DEVICES];
int lb_launch_gated;
struct slow lb_gate_slow[LB_REGION_MAX_DEVICES];
const _Atomic uint32_t lb_gate_shut = 1;

/* The oldest markers that completed (lock held). */
void lb_gate_poll_markers(struct slow *sl, int64_t now)
{
    __typeof__(&cuEventQuery) query = LB_REAL(cuEventQuery);
    while (sl->mk.count && query) {
        lb_guard_enter();
        CUresult r = query((CUevent)sl->mk.ring[sl->mk.head].ev);
        lb_guard_leave();
        if (r == CUDA_ERROR_NOT_READY) {
            lb_mk_pending(&sl->mk, now);
            break;
        }
        lb_mk_done(&sl->mk, now); /* an error (its context is gone) counts as done */
    }
}

/* The last marked batch's launches, as far as it went, are counted as the scheduler's slices let
 * them through (limiter.h: the pacing's seed); it is not counted again (lock held). */
void lb_gate_count_batch(int d, struct slow *sl, int64_t now)
{
    int32_t left = atomic_load_explicit(&lb_gates[d].left, memory_order_relaxed);
    if (sl->issued && left != INT32_MAX) {
        uint32_t unused = left > 0 ? (uint32_t)left : 0;
        lb_limiter_count_scheduled(d, unused < sl->issued ? sl->issued - unused : 1, sl->batch_k, sl->batch_b, now);
    }
    sl->issued = 0;
}
