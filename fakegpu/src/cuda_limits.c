/*
 * cuCtxSetLimit / cuCtxGetLimit. Three limits are device memory the program chooses: the malloc
 * heap of device code (default 8 MiB), the printf FIFO (default 1 MiB) and the stack of every
 * thread the device can hold resident (default 1 KiB per thread, times sm_count x 2048 threads).
 * What a context holds beyond those defaults is charged to the process while the context lives,
 * exactly (the defaults are part of the context's own cost, context_mib). The other limits only
 * hold values.
 */
#include "cuda_internal.h"

#define NLIMITS (CU_LIMIT_PERSISTING_L2_CACHE_SIZE + 1)
#define THREADS_PER_SM 2048ULL

static const uint64_t defaults[NLIMITS] = {1024, 1 << 20, 8 << 20, 2, 2048, 64, 0};

uint64_t fg_limit_extra(const fg_ctx *c) {
    const uint64_t *v = c->limits;
    uint64_t threads = (uint64_t)fg_cu.dev[c->dev].sm_count * THREADS_PER_SM, extra = 0;
    for (int l = CU_LIMIT_STACK_SIZE; l <= CU_LIMIT_MALLOC_HEAP_SIZE; l++) {
        uint64_t now = v[l] ? v[l] : defaults[l];
        uint64_t more = now > defaults[l] ? now - defaults[l] : 0;
        extra += l == CU_LIMIT_STACK_SIZE ? more * threads : more;
    }
    return extra;
}

/* The context is gone: so is what it held beyond the defaults. fg_cu.mu held. */
static void limits_gone(fg_ctx *c) {
    uint64_t extra = fg_limit_extra(c);
    if (extra)
        fg_mem_uncharge(c->dev, extra);
    for (int l = 0; l < NLIMITS; l++)
        c->limits[l] = 0;
}
static const fg_cu_observer limits_observer = {.ctx_gone = limits_gone};
static void __attribute__((constructor)) limits_register(void) { fg_cu_observe(&limits_observer, FG_CU_STAGE_CONTEXT); }

FG_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
    fg_ctx *c;
    CUresult r = fg_cu_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if ((int)limit < 0 || limit >= NLIMITS)
        return CUDA_ERROR_NOT_SUPPORTED;
    if ((limit == CU_LIMIT_MALLOC_HEAP_SIZE || limit == CU_LIMIT_PRINTF_FIFO_SIZE || limit == CU_LIMIT_STACK_SIZE) &&
        (value == 0 || value > (1ULL << 40)))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    uint64_t before = fg_limit_extra(c), old = c->limits[limit];
    c->limits[limit] = value;
    uint64_t after = fg_limit_extra(c);
    if (after > before && (r = fg_mem_charge(c->dev, after - before)) != CUDA_SUCCESS)
        c->limits[limit] = old; /* the device has not that much left */
    else if (after < before)
        fg_mem_uncharge(c->dev, before - after);
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit) {
    fg_ctx *c;
    CUresult r = fg_cu_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pvalue)
        return CUDA_ERROR_INVALID_VALUE;
    if ((int)limit < 0 || limit >= NLIMITS)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&fg_cu.mu);
    *pvalue = (size_t)(c->limits[limit] ? c->limits[limit] : defaults[limit]);
    pthread_mutex_unlock(&fg_cu.mu);
    return CUDA_SUCCESS;
}
