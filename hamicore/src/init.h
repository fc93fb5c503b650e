#ifndef LB_INIT_H
#define LB_INIT_H

#include <stdatomic.h>

#include "guard.h"

/* lb_state: what the wrappers do. */
#define LB_STATE_UNINIT 0
#define LB_STATE_PASSTHROUGH 1 /* CUDA_DISABLE_CONTROL, or called re-entrantly during init */
#define LB_STATE_ENFORCE 2
extern _Atomic int lb_state;


int lb_active_slow(void);

/* 1 when the wrapper must enforce limits, 0 for pure pass-through. Runs the one-time init. */
static inline int lb_active(void)
{
    if (__builtin_expect(atomic_load_explicit(&lb_state, memory_order_acquire) == LB_STATE_ENFORCE, 1))
        return 1;
    return lb_active_slow();
}

#endif
