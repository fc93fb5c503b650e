/* Context hooks: they keep the per-thread device cache of ctxcache.h right, tell the modules that
 * keep something per context when one is destroyed (context.h: the modules register themselves),
 * and have every context beyond a process's first on a GPU charged (ctxcount.c). */
#include "context.h"

#include "ctxcache.h"
#include "ctxcount.h"
#include "limitbed/region.h"
#include "devmap.h"
#include "guard.h"
#include "reserve.h"
#include "symbols.h"

/* The primary context of each device, as cuDevicePrimaryCtxRetain handed it out: what a reset or
 * the last release destroys. */
#define MAX_ORD 256
static _Atomic uintptr_t g_primary[MAX_ORD];

/* What each module does when a context dies, by slot; written by constructors only (before any
 * thread of the process can call a hook), read afterwards. A slot nobody registered releases
 * nothing: the process stays charged for it (never under-counted). */
static lb_ctx_gone_fn g_gone[LB_CTX_GONE_SLOTS];

void lb_ctx_on_gone(enum lb_ctx_gone_slot slot, lb_ctx_gone_fn fn)
{
    if ((unsigned)slot < LB_CTX_GONE_SLOTS)
        g_gone[slot] = fn;
}

/* The driver freed everything ctx owned: so do we (allocations, and what pools and graph
 * memory gave back with it). */
static void ctx_gone(uintptr_t ctx)
{
    if (!ctx)
        return;
    for (int s = 0; s < LB_CTX_GONE_SLOTS; s++)
        if (g_gone[s])
            g_gone[s](ctx);
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
