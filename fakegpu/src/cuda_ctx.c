/*
 * Contexts. Handles point into two static arrays (one primary context per device, a pool for
 * cuCtxCreate), so a stale handle is recognised by its magic rather than read after free.
 * Every context costs the profile's context_mib of device memory, charged in the shared state
 * while it exists, like the real driver's per-context reservation.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "cuda_internal.h"

#define FG_STACK 16
static __thread fg_ctx *tls_stack[FG_STACK]; /* the per-thread context stack */
static __thread int tls_depth;

static int in_array(const fg_ctx *c, const fg_ctx *base, size_t n) {
    uintptr_t p = (uintptr_t)c, b = (uintptr_t)base;
    return p >= b && p < b + n * sizeof *base && (p - b) % sizeof *base == 0;
}

int fg_cu_ctx_valid(const fg_ctx *c) {
    if (!c || !(in_array(c, fg_cu.primary, FG_MAX_UNITS) || in_array(c, fg_cu.pool, FG_MAX_CTX)))
        return 0;
    return __atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) == FG_CTX_LIVE;
}

fg_ctx *fg_cu_current(void) {
    fg_ctx *c = tls_depth ? tls_stack[tls_depth - 1] : NULL;
    return fg_cu_ctx_valid(c) ? c : NULL;
}

CUresult fg_cu_need_ctx(fg_ctx **out) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    fg_ctx *c = fg_cu_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (fg_cu_lost(c->dev))
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    *out = c;
    return CUDA_SUCCESS;
}

CUresult fg_ctx_charge(int ordinal, int add) {
    uint64_t bytes = fg_cu.cfg.prof.context_mib * FG_MIB;
    if (bytes == 0)
        return CUDA_SUCCESS;
    if (fg_state_lock(&fg_cu.st) != 0)
        return CUDA_ERROR_UNKNOWN;
    int rc = 0;
    if (add)
        rc = fg_state_charge(&fg_cu.st, fg_cu.dev[ordinal].unit, bytes, fg_cu.dev[ordinal].total, 1);
    else
        fg_state_release(&fg_cu.st, fg_cu.dev[ordinal].unit, bytes, 1);
    fg_state_unlock(&fg_cu.st);
    if (rc == -2)
        fg_log("more than %d processes use the device state %s", FG_MAX_SLOTS, fg_cu.st.path);
    return rc ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

/* Called with fg_cu.mu held. */
static void destroy_locked(fg_ctx *c) {
    __atomic_store_n(&c->magic, 0, __ATOMIC_RELEASE);
    fg_cu_ctx_gone(c); /* every module's part: allocations, reserves, limits, modules */
    fg_ctx_charge(c->dev, 0);
    c->refs = 0;
}

static void ctx_forget_all(void) {
    memset(fg_cu.primary, 0, sizeof fg_cu.primary);
    memset(fg_cu.pool, 0, sizeof fg_cu.pool);
}
static const fg_cu_observer ctx_observer = {.forget_all = ctx_forget_all};
static void __attribute__((constructor)) ctx_register(void) { fg_cu_observe(&ctx_observer, FG_CU_STAGE_CONTEXT); }

static CUresult check_dev(CUdevice dev) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!fg_cu_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    return fg_cu_lost(dev) ? CUDA_ERROR_DEVICE_UNAVAILABLE : CUDA_SUCCESS;
}

FG_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    CUresult r = check_dev(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    fg_ctx *c = &fg_cu.primary[dev];
    if (c->refs == 0) {
        r = fg_ctx_charge(dev, 1);
        if (r == CUDA_SUCCESS) {
            c->dev = dev, c->primary = 1;
            __atomic_store_n(&c->magic, FG_CTX_LIVE, __ATOMIC_RELEASE);
        }
    }
    if (r == CUDA_SUCCESS) {
        c->refs++;
        *pctx = (CUcontext)c;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!fg_cu_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fg_cu.mu);
    fg_ctx *c = &fg_cu.primary[dev];
    if (c->refs == 0)
        r = CUDA_ERROR_INVALID_CONTEXT;
    else if (--c->refs == 0)
        destroy_locked(c);
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

FG_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!fg_cu_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fg_cu.mu);
    if (fg_cu.primary[dev].refs)
        destroy_locked(&fg_cu.primary[dev]);
    pthread_mutex_unlock(&fg_cu.mu);
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

static CUresult push(fg_ctx *c) {
    if (tls_depth == FG_STACK)
        return CUDA_ERROR_INVALID_VALUE;
    tls_stack[tls_depth++] = c;
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    (void)flags;
    CUresult r = check_dev(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    fg_ctx *c = NULL;
    for (int i = 0; i < FG_MAX_CTX && !c; i++)
        if (fg_cu.pool[i].magic != FG_CTX_LIVE)
            c = &fg_cu.pool[i];
    r = c ? fg_ctx_charge(dev, 1) : CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        c->dev = dev, c->primary = 0, c->refs = 1;
        __atomic_store_n(&c->magic, FG_CTX_LIVE, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&fg_cu.mu);
    if (r == CUDA_SUCCESS) {
        *pctx = (CUcontext)c;
        push(c); /* cuCtxCreate makes the new context current */
    }
    return r;
}

FG_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    return cuCtxCreate_v2(pctx, flags, dev);
}

/* Execution-affinity parameters only partition SMs; the fake has none to partition. */
FG_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, void *paramsArray, int numParams, unsigned int flags,
                                  CUdevice dev) {
    (void)paramsArray, (void)numParams;
    return cuCtxCreate_v2(pctx, flags, dev);
}

FG_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, void *ctxCreateParams, unsigned int flags, CUdevice dev) {
    (void)ctxCreateParams, (void)flags, (void)dev;
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    return pctx ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
}

FG_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    fg_ctx *c = (fg_ctx *)ctx;
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    if (!fg_cu_ctx_valid(c) || c->primary)
        r = CUDA_ERROR_INVALID_CONTEXT;
    else
        destroy_locked(c);
    pthread_mutex_unlock(&fg_cu.mu);
    if (r == CUDA_SUCCESS) /* drop it from this thread's stack; other threads see a dead handle */
        for (int i = tls_depth - 1; i >= 0; i--)
            if (tls_stack[i] == c) {
                memmove(&tls_stack[i], &tls_stack[i + 1], (size_t)(tls_depth - i - 1) * sizeof tls_stack[0]);
                tls_depth--;
            }
    return r;
}

FG_EXPORT CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }

FG_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)fg_cu_current();
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ctx) { /* NULL pops the top, per the documentation */
        if (tls_depth)
            tls_depth--;
        return CUDA_SUCCESS;
    }
    if (!fg_cu_ctx_valid((fg_ctx *)ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth == 0)
        return push((fg_ctx *)ctx);
    tls_stack[tls_depth - 1] = (fg_ctx *)ctx;
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!fg_cu_ctx_valid((fg_ctx *)ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    return push((fg_ctx *)ctx);
}

FG_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }

FG_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (tls_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    fg_ctx *c = tls_stack[--tls_depth];
    if (pctx)
        *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx) { return cuCtxPopCurrent_v2(pctx); }

FG_EXPORT CUresult cuCtxGetDevice(CUdevice *device) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    fg_ctx *c = fg_cu_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = c->dev;
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!fg_cu_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    *flags = 0;
    *active = fg_cu.primary[dev].refs > 0;
    pthread_mutex_unlock(&fg_cu.mu);
    return CUDA_SUCCESS;
}

