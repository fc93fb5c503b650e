#ifndef LB_INIT_H
#define LB_INIT_H

#include <stdatomic.h>

/* lb_state: what the wrappers do. */
#define LB_STATE_UNINIT 0
#define LB_STATE_PASSTHROUGH 1 /* called re-entrantly during init */
#define LB_STATE_ENFORCE 2
extern _Atomic int lb_state;

/* Per-thread reentrancy depth: >0 while this thread runs our initialization or loads a driver.
 * Wrappers reached in that window pass straight through instead of waiting on the init. */
extern _Thread_local int lb_guard __attribute__((tls_model("initial-exec")));
static inline void lb_guard_enter(void) { lb_guard++; }
static inline void lb_guard_leave(void) { lb_guard--; }

int lb_active_slow(void);

/* 1 when the wrapper must enforce limits, 0 for pure pass-through. Runs the one-time init. */
static inline int lb_active(void)
{
    if (__builtin_expect(atomic_load_explicit(&lb_state, memory_order_acquire) == LB_STATE_ENFORCE, 1))
        return 1;
    return lb_active_slow();
}

#endif
