/* The device of the calling thread's current context, cached per thread (ctxcache.c).
 *
 * Every allocation is charged to that device; asking the driver (cuCtxGetDevice) on each one was
 * the largest single cost of the allocation path. The current context is per thread and changes
 * only through the context entry points, which are all interposed (context.c): those that change
 * the calling thread's context drop its cache; those that can change or destroy a context current
 * on other threads (cuCtxDestroy, primary-context release/reset) bump a process-wide epoch that
 * drops every thread's cache. A wrong cache could only come from a driver entry point that
 * changes the current context without being one of them (docs/hamicore.md). */
#ifndef LB_CTXCACHE_H
#define LB_CTXCACHE_H

#include <stdatomic.h>
#include <stdint.h>

#define LB_CTX_MAX_ORD 16 /* the limiter's per-device arrays (limitbed/region.h's 16 devices) */

struct lb_dev_cache {
    unsigned long epoch; /* == lb_ctx_epoch: the rest is valid (0 never is: the epoch starts at 1) */
    int ord;             /* the CUDA ordinal */
    int phys;            /* its physical GPU (devmap.h): the region's and the limits file's index */
    uintptr_t ctx;       /* the current context: what owns the allocations made now */
};

extern _Atomic unsigned long lb_ctx_epoch;
extern _Thread_local struct lb_dev_cache lb_tls_dev __attribute__((tls_model("initial-exec")));

/* Fills the cache; 0, or -1 without a current context. */
int lb_cur_slow(void);

static inline int lb_cur_fresh(void)
{
    return __builtin_expect(lb_tls_dev.epoch == atomic_load_explicit(&lb_ctx_epoch, memory_order_relaxed), 1) ||
           lb_cur_slow() == 0;
}

/* The compute limiter's view: 0 and *dev = the CUDA ordinal of the current context;
 * LB_DEV_NONE without a current context (the driver refuses the launch itself); LB_DEV_BEYOND for
 * an ordinal past the launch gates' arrays, whose launches cannot be held (a gated launch there is
 * refused: lb_gate_beyond). */
#define LB_DEV_NONE (-1)
#define LB_DEV_BEYOND (-2)
static inline int lb_cur_device(int *dev)
{
    if (!lb_cur_fresh())
        return LB_DEV_NONE;
    if (lb_tls_dev.ord >= LB_CTX_MAX_ORD)
        return LB_DEV_BEYOND;
    *dev = lb_tls_dev.ord;
    return 0;
}

/* Memory's view: 0 and *phys = the current context's GPU (its region index) and *ord its CUDA
 * ordinal; LB_CUR_NONE without a current context (the driver refuses the call itself);
 * LB_CUR_UNKNOWN when the GPU cannot be told or is beyond the region's 16 (refuse). */
#define LB_CUR_NONE (-1)
#define LB_CUR_UNKNOWN (-2)
static inline int lb_cur_mem(int *phys, int *ord)
{
    if (!lb_cur_fresh())
        return LB_CUR_NONE;
    *ord = lb_tls_dev.ord;
    *phys = lb_tls_dev.phys;
    return *phys >= 0 ? 0 : LB_CUR_UNKNOWN;
}

/* The current context, valid after lb_cur_device returned 0. */
static inline uintptr_t lb_cur_ctx(void) { return lb_tls_dev.ctx; }

/* The calling thread's current context changed. */
static inline void lb_ctx_changed_here(void) { lb_tls_dev.epoch = 0; }
/* A context that may be current on any thread was destroyed or reset. */
static inline void lb_ctx_changed_all(void) { atomic_fetch_add(&lb_ctx_epoch, 1); }

#endif
