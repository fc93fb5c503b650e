/*
 * Stream-ordered memory pools, as the driver keeps them: a pool holds device memory *reserved*
 * (charged to the device in the shared state) and hands parts of it out as *used*. An allocation
 * takes free reserved memory first and grows the reserve only for the rest; cuMemFreeAsync gives
 * memory back to the pool, not to the device. At a synchronisation point (cuStreamSynchronize,
 * cuCtxSynchronize) a pool gives back what it holds beyond its release threshold (default 0);
 * cuMemPoolTrimTo gives back down to a bound. So with a high threshold, freed memory stays
 * reserved and the device's free memory does not come back — what limits must count.
 *
 * Reuse is by bytes, not by blocks: any free reserved byte serves any allocation (a real pool
 * can fragment; the fake never does). Every device has a default pool, current until
 * cuDeviceSetMemPool; a primary-context reset empties the default pool and restores it as current.
 * Handles point into static arrays and carry a magic, so a stale one is recognised.
 * Everything here runs under fg_cu.mu.
 */
#include <string.h>

#include "cuda_internal.h"

#define FG_MAX_POOLS 64
#define FG_POOL_LIVE 0x4c4f4f50u /* "POOL" */

typedef struct fg_pool {
    uint32_t magic;
    int dev;
    uint64_t reserved, used, threshold, reserved_high, used_high;
} fg_pool;

static fg_pool defaults[FG_MAX_UNITS], created[FG_MAX_POOLS];
static fg_pool *current[FG_MAX_UNITS];

static int in_array(const fg_pool *p, const fg_pool *base, size_t n) {
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)base;
    return a >= b && a < b + n * sizeof *base && (a - b) % sizeof *base == 0;
}

int fg_pool_valid(const fg_pool *p) {
    return p && (in_array(p, defaults, FG_MAX_UNITS) || in_array(p, created, FG_MAX_POOLS)) && p->magic == FG_POOL_LIVE;
}

int fg_pool_dev(const fg_pool *p) { return p->dev; }

static fg_pool *default_of(int dev) {
    fg_pool *p = &defaults[dev];
    if (p->magic != FG_POOL_LIVE)
        *p = (fg_pool){.magic = FG_POOL_LIVE, .dev = dev};
    return p;
}

fg_pool *fg_pool_current(int dev) {
    if (!fg_cu_dev_valid(dev))
        return NULL;
    fg_pool *p = current[dev];
    return fg_pool_valid(p) ? p : default_of(dev);
}

CUresult fg_pool_take(fg_pool *p, uint64_t bytes) {
    if (!fg_pool_valid(p))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t spare = p->reserved - p->used;
    if (bytes > spare) {
        CUresult r = fg_mem_charge(p->dev, bytes - spare);
        if (r != CUDA_SUCCESS)
            return r;
        p->reserved += bytes - spare;
    }
    p->used += bytes;
    if (p->reserved > p->reserved_high)
        p->reserved_high = p->reserved;
    if (p->used > p->used_high)
        p->used_high = p->used;
    return CUDA_SUCCESS;
}

void fg_pool_give(fg_pool *p, uint64_t bytes) {
    if (fg_pool_valid(p))
        p->used = p->used > bytes ? p->used - bytes : 0;
}

static void trim(fg_pool *p, uint64_t keep) {
    uint64_t floor = keep > p->used ? keep : p->used;
    if (p->reserved > floor) {
        fg_mem_uncharge(p->dev, p->reserved - floor);
        p->reserved = floor;
    }
}

void fg_pool_sync(int dev) {
    for (int i = 0; i < FG_MAX_UNITS; i++)
        if (defaults[i].magic == FG_POOL_LIVE && (dev < 0 || i == dev))
            trim(&defaults[i], defaults[i].threshold);
    for (int i = 0; i < FG_MAX_POOLS; i++)
        if (created[i].magic == FG_POOL_LIVE && (dev < 0 || created[i].dev == dev))
            trim(&created[i], created[i].threshold);
}

/* A destroyed context (primary: reset) on the device. */
static void pool_ctx_gone(int dev, int primary) {
    if (primary && defaults[dev].magic == FG_POOL_LIVE) {
        trim(&defaults[dev], 0);
        defaults[dev].threshold = defaults[dev].reserved_high = defaults[dev].used_high = 0;
        current[dev] = NULL;
    }
    fg_pool_sync(dev);
}

static void pool_forget_all(void) {
    memset(defaults, 0, sizeof defaults);
    memset(created, 0, sizeof created);
    memset(current, 0, sizeof current);
}
static void pool_observe_ctx(fg_ctx *c) { pool_ctx_gone(c->dev, c->primary); }
static const fg_cu_observer pool_observer = {.ctx_gone = pool_observe_ctx, .forget_all = pool_forget_all};
static void __attribute__((constructor)) pool_register(void) { fg_cu_observe(&pool_observer, FG_CU_STAGE_RESERVES); }

FG_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_cu_dev_valid(props->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&fg_cu.mu);
    for (int i = 0; i < FG_MAX_POOLS; i++)
        if (created[i].magic != FG_POOL_LIVE) {
            created[i] = (fg_pool){.magic = FG_POOL_LIVE, .dev = props->location.id};
            *pool = (CUmemoryPool)&created[i];
            r = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

/* Destroying a pool that still has allocations defers the release in the driver; the fake
 * gives back only what is not in use and keeps the rest charged until those are freed. */
FG_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    fg_pool *p = (fg_pool *)pool;
    pthread_mutex_lock(&fg_cu.mu);
    if (!fg_pool_valid(p) || !in_array(p, created, FG_MAX_POOLS)) {
        r = CUDA_ERROR_INVALID_VALUE; /* a default pool cannot be destroyed */
    } else {
        trim(p, 0);
        if (p->used == 0)
            p->magic = 0;
        p->threshold = 0;
        for (int i = 0; i < FG_MAX_UNITS; i++)
            if (current[i] == p)
                current[i] = NULL;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&fg_cu.mu);
    if (fg_pool_valid((fg_pool *)pool))
        trim((fg_pool *)pool, minBytesToKeep);
    else
        r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    fg_pool *p = (fg_pool *)pool;
    pthread_mutex_lock(&fg_cu.mu);
    if (!fg_pool_valid(p) || !value) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        uint64_t v = 0;
        switch (attr) {
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: break; /* reuse policy: no effect here */
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: memcpy(&p->threshold, value, sizeof p->threshold); break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
            memcpy(&v, value, sizeof v);
            if (v != 0) { /* the high-water marks can only be reset */
                r = CUDA_ERROR_INVALID_VALUE;
                break;
            }
            if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
                p->reserved_high = p->reserved;
            else
                p->used_high = p->used;
            break;
        default: r = CUDA_ERROR_INVALID_VALUE;
        }
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    fg_pool *p = (fg_pool *)pool;
    pthread_mutex_lock(&fg_cu.mu);
    if (!fg_pool_valid(p) || !value) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        uint64_t v = 0;
        int iv = 1;
        switch (attr) {
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: memcpy(value, &iv, sizeof iv); break;
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: v = p->threshold; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: v = p->reserved; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: v = p->reserved_high; break;
        case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: v = p->used; break;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH: v = p->used_high; break;
        default: r = CUDA_ERROR_INVALID_VALUE;
        }
        if (r == CUDA_SUCCESS && attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
            memcpy(value, &v, sizeof v);
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_cu_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fg_cu.mu);
    *pool = (CUmemoryPool)default_of(dev);
    pthread_mutex_unlock(&fg_cu.mu);
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_cu_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fg_cu.mu);
    *pool = (CUmemoryPool)fg_pool_current(dev);
    pthread_mutex_unlock(&fg_cu.mu);
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!fg_cu_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fg_cu.mu);
    fg_pool *p = (fg_pool *)pool;
    if (!fg_pool_valid(p) || p->dev != dev)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        current[dev] = p;
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}
