/* Context hooks: they keep the per-thread device cache of context.h right, release what a
 * destroyed context held, and have every context beyond a process's first on a GPU charged
 * (ctxcount.c). */
#include "context.h"

#include "ctxcount.h"
#include "limitbed/region.h"
#include "devmap.h"
#include "graph.h"
#include "guard.h"
#include "memory.h"
#include "reserve.h"
#include "symbols.h"

/* The primary context of each device, as cuDevicePrimaryCtxRetain handed it out: what a reset or
 * the last release destroys. */
#define MAX_ORD 256
static _Atomic uintptr_t g_primary[MAX_ORD];

/* The driver freed everything ctx owned: so do we (allocations, and what pools and graph
 * memory gave back with it). */
static void ctx_gone(uintptr_t ctx)
{
    if (!ctx)
        return;
    lb_memory_ctx_gone(ctx);
    lb_graph_ctx_gone(ctx);
    lb_ctxlimit_gone(ctx);
    lb_modules_ctx_gone(ctx);
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++)
        lb_reserve_settle_all(d);
}

static uintptr_t primary_of(CUdevice dev)
{
    return dev >= 0 && dev < MAX_ORD ? atomic_load(&g_primary[dev]) : 0;
}

/* After a release: the context is gone once the driver says it is inactive. */
static void released(CUdevice dev)
{
    unsigned flags;
    int active = 1;
    __typeof__(&cuDevicePrimaryCtxGetState) st = LB_REAL(cuDevicePrimaryCtxGetState);
    if (st && st(dev, &flags, &active) == CUDA_SUCCESS && !active) {
        ctx_gone(primary_of(dev));
        lb_ctx_primary_gone(dev);
    }
}

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


/* The cache is dropped after the call: whatever the driver did (even on an error), the next
 * allocation asks it again. */
LB_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    REAL_OR_FAIL(cuCtxSetCurrent);
    CUresult r = real(ctx);
    lb_ctx_changed_here();
    return r;
}

LB_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    REAL_OR_FAIL(cuCtxPushCurrent_v2);
    CUresult r = real(ctx);
    lb_ctx_changed_here();
    return r;
}

CUresult lbw_cuCtxPushCurrent_v1(CUcontext ctx)
{
    REAL_OR_FAIL(lbw_cuCtxPushCurrent_v1);
    CUresult r = real(ctx);
    lb_ctx_changed_here();
    return r;
}

LB_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    REAL_OR_FAIL(cuCtxPopCurrent_v2);
    CUresult r = real(pctx);
    lb_ctx_changed_here();
    return r;
}

CUresult lbw_cuCtxPopCurrent_v1(CUcontext *pctx)
{
    REAL_OR_FAIL(lbw_cuCtxPopCurrent_v1);
    CUresult r = real(pctx);
    lb_ctx_changed_here();
    return r;
}

/* cuCtxCreate makes the new context current on the calling thread. */
LB_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    REAL_OR_FAIL(cuCtxCreate_v2);
    int phys;
    if (!lb_ctx_created_begin(dev, &phys, __builtin_return_address(0)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(pctx, flags, dev);
    lb_ctx_created_end(r, r == CUDA_SUCCESS && pctx ? *pctx : NULL, phys);
    lb_ctx_changed_here();
    return r;
}

CUresult lbw_cuCtxCreate_v1(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    REAL_OR_FAIL(lbw_cuCtxCreate_v1);
    int phys;
    if (!lb_ctx_created_begin(dev, &phys, __builtin_return_address(0)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(pctx, flags, dev);
    lb_ctx_created_end(r, r == CUDA_SUCCESS && pctx ? *pctx : NULL, phys);
    lb_ctx_changed_here();
    return r;
}

LB_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, void *paramsArray, int numParams, unsigned int flags,
                                  CUdevice dev)
{
    REAL_OR_FAIL(cuCtxCreate_v3);
    int phys;
    if (!lb_ctx_created_begin(dev, &phys, __builtin_return_address(0)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(pctx, paramsArray, numParams, flags, dev);
    lb_ctx_created_end(r, r == CUDA_SUCCESS && pctx ? *pctx : NULL, phys);
    lb_ctx_changed_here();
    return r;
}

LB_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, void *ctxCreateParams, unsigned int flags, CUdevice dev)
{
    REAL_OR_FAIL(cuCtxCreate_v4);
    int phys;
    if (!lb_ctx_created_begin(dev, &phys, __builtin_return_address(0)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(pctx, ctxCreateParams, flags, dev);
    lb_ctx_created_end(r, r == CUDA_SUCCESS && pctx ? *pctx : NULL, phys);
    lb_ctx_changed_here();
    return r;
}

/* Destroying a context pops it from the calling thread, and it may be current elsewhere. */
LB_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    REAL_OR_FAIL(cuCtxDestroy_v2);
    CUresult r = real(ctx);
    lb_ctx_changed_all();
    if (r == CUDA_SUCCESS) {
        ctx_gone((uintptr_t)ctx);
        lb_ctx_destroyed(ctx);
    }
    return r;
}

CUresult lbw_cuCtxDestroy_v1(CUcontext ctx)
{
    REAL_OR_FAIL(lbw_cuCtxDestroy_v1);
    CUresult r = real(ctx);
    lb_ctx_changed_all();
    if (r == CUDA_SUCCESS) {
        ctx_gone((uintptr_t)ctx);
        lb_ctx_destroyed(ctx);
    }
    return r;
}

LB_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    REAL_OR_FAIL(cuDevicePrimaryCtxRetain);
    unsigned flags;
    int active = 0, phys;
    __typeof__(&cuDevicePrimaryCtxGetState) st = LB_REAL(cuDevicePrimaryCtxGetState);
    if (st && st(dev, &flags, &active) != CUDA_SUCCESS)
        active = 0;
    if (!lb_ctx_primary_begin(dev, &phys, active, __builtin_return_address(0)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(pctx, dev);
    lb_ctx_primary_end(dev, r, phys);
    if (r == CUDA_SUCCESS && !lb_guard)
        (void)lb_phys_index(dev); /* which GPU it is, asked now: NVML may not load later (no descriptors) */
    if (r == CUDA_SUCCESS && pctx && dev >= 0 && dev < MAX_ORD)
        atomic_store(&g_primary[dev], (uintptr_t)*pctx);
    return r;
}

/* Releasing the last reference or resetting destroys the primary context, wherever current.
 * (cuDevicePrimaryCtxRetain makes nothing current, so it needs no hook.) */
LB_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    REAL_OR_FAIL(cuDevicePrimaryCtxRelease_v2);
    CUresult r = real(dev);
    lb_ctx_changed_all();
    if (r == CUDA_SUCCESS)
        released(dev);
    return r;
}

CUresult lbw_cuDevicePrimaryCtxRelease_v1(CUdevice dev)
{
    REAL_OR_FAIL(lbw_cuDevicePrimaryCtxRelease_v1);
    CUresult r = real(dev);
    lb_ctx_changed_all();
    if (r == CUDA_SUCCESS)
        released(dev);
    return r;
}

LB_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    REAL_OR_FAIL(cuDevicePrimaryCtxReset_v2);
    uintptr_t ctx = primary_of(dev);
    CUresult r = real(dev);
    lb_ctx_changed_all();
    if (r == CUDA_SUCCESS) {
        ctx_gone(ctx);
        lb_ctx_primary_gone(dev);
    }
    return r;
}

CUresult lbw_cuDevicePrimaryCtxReset_v1(CUdevice dev)
{
    REAL_OR_FAIL(lbw_cuDevicePrimaryCtxReset_v1);
    uintptr_t ctx = primary_of(dev);
    CUresult r = real(dev);
    lb_ctx_changed_all();
    if (r == CUDA_SUCCESS) {
        ctx_gone(ctx);
        lb_ctx_primary_gone(dev);
    }
    return r;
}
