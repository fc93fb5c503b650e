/* The device of the calling thread's current context, cached per thread.
 *
 * Every allocation is charged to that device; asking the driver (cuCtxGetDevice) on each one was
 * the largest single cost of the allocation path. The current context is per thread and changes
 * only through the context entry points, which are all interposed (context.c): those that change
 * the calling thread's context drop its cache; those that can change or destroy a context current
 * on other threads (cuCtxDestroy, primary-context release/reset) bump a process-wide epoch that
 * drops every thread's cache. A wrong cache could only come from a driver entry point that
 * changes the current context without being one of them (docs/hamicore.md). */
#ifndef LB_CONTEXT_H
#define LB_CONTEXT_H

#include <stdatomic.h>
#include <stdint.h>

struct lb_dev_cache {
    unsigned long epoch; /* == lb_ctx_epoch: dev and ctx are valid (0 never is: the epoch starts at 1) */
    int dev;
    uintptr_t ctx; /* the current context: what owns the allocations made now */
};

extern _Atomic unsigned long lb_ctx_epoch;
extern _Thread_local struct lb_dev_cache lb_tls_dev __attribute__((tls_model("initial-exec")));

int lb_cur_device_slow(int *dev);

/* 0 and *dev = the CUDA ordinal of the current context; -1 if there is none (or it is out of the
 * region's range): the caller then passes the call through uncharged. */
static inline int lb_cur_device(int *dev)
{
    if (__builtin_expect(lb_tls_dev.epoch == atomic_load_explicit(&lb_ctx_epoch, memory_order_relaxed), 1)) {
        *dev = lb_tls_dev.dev;
        return 0;
    }
    return lb_cur_device_slow(dev);
}

/* The current context, valid after lb_cur_device returned 0. */
static inline uintptr_t lb_cur_ctx(void) { return lb_tls_dev.ctx; }

/* The calling thread's current context changed. */
static inline void lb_ctx_changed_here(void) { lb_tls_dev.epoch = 0; }
/* A context that may be current on any thread was destroyed or reset. */
static inline void lb_ctx_changed_all(void) { atomic_fetch_add(&lb_ctx_epoch, 1); }

#endif
