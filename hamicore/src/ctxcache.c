/* The per-thread device cache of ctxcache.h: filled from the driver on a miss, dropped by the
 * context hooks (context.c) and by a fork. */
#include "ctxcache.h"

#include <pthread.h>

#include "limitbed/region.h"
#include "devmap.h"
#include "symbols.h"

_Atomic unsigned long lb_ctx_epoch = 1;
_Thread_local struct lb_dev_cache lb_tls_dev __attribute__((tls_model("initial-exec")));

int lb_cur_slow(void)
{
    /* Snapshot the epoch before asking: a destroy racing with the call then invalidates what we
     * cache instead of being overwritten by it. */
    unsigned long epoch = atomic_load_explicit(&lb_ctx_epoch, memory_order_relaxed);
    CUdevice d;
    CUcontext c = NULL;
    __typeof__(&cuCtxGetDevice) f = LB_REAL(cuCtxGetDevice);
    __typeof__(&cuCtxGetCurrent) g = LB_REAL(cuCtxGetCurrent);
    if (!f || f(&d) != CUDA_SUCCESS || d < 0)
        return -1; /* no current context: not cached, the driver will refuse the call itself */
    if (g)
        (void)g(&c);
    int phys = lb_phys_index(d);
    lb_tls_dev.ord = d;
    lb_tls_dev.phys = phys < LB_REGION_MAX_DEVICES ? phys : -1;
    lb_tls_dev.ctx = (uintptr_t)c;
    /* An unknown GPU is asked again next time (its allocations are refused meanwhile); so is an
     * ordinal past the launch gates' arrays (gate.h's fast path trusts a valid cache to index them,
     * and the slow path passes such an ordinal's launches through: lb_cur_device). */
    lb_tls_dev.epoch = phys >= 0 && d < LB_CTX_MAX_ORD ? epoch : 0;
    return 0;
}

/* A forked child is a new process: every cache its threads had (only the forking one survives)
 * is dropped. Registration only, when the library is loaded. */
static void fork_child(void) { lb_ctx_changed_all(); }
static void __attribute__((constructor(101))) ctxcache_register_fork(void) { pthread_atfork(NULL, NULL, fork_child); }
