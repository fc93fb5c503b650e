/*
 * The VMM family with the driver's lifetimes: the physical memory of cuMemCreate lives while
 * its handle has a reference (cuMemCreate, cuMemRetainAllocationHandle; cuMemRelease drops one)
 * OR a mapping (cuMemMap; cuMemUnmap drops it). It is charged at cuMemCreate, before the driver
 * is called, and released when the last of both goes: create → map → release right away, the
 * documented pattern, stays charged until the unmap.
 *
 * Bookkeeping: fixed arrays (4096 allocations, 16384 mappings) under one mutex, taken only after
 * the driver call returned (never across it). Host-located allocations are not charged. A full
 * table logs once and leaves the allocation charged until the process exits.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "context.h"
#include "devmap.h"
#include "guard.h"
#include "init.h"
#include "log.h"
#include "memory.h"
#include "region.h"
#include "symbols.h"

#define MAX_PHYS 4096
#define MAX_MAPS 16384

struct phys {
    CUmemGenericAllocationHandle h;
    uint64_t size;
    int dev;
    unsigned refs, maps;
};

struct map {
    CUdeviceptr va;
    uint64_t size;
    CUmemGenericAllocationHandle h;
};

static struct phys g_phys[MAX_PHYS];
static struct map g_maps[MAX_MAPS];
static int g_nphys, g_nmaps;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_full_logged;

static void prepare(void) { pthread_mutex_lock(&g_mu); }
static void parent(void) { pthread_mutex_unlock(&g_mu); }
/* The child owns none of the parent's GPU memory: empty tables, in O(1). */
static void child(void)
{
    g_nphys = g_nmaps = 0;
    pthread_mutex_unlock(&g_mu); /* held by the forking thread (prepare) */
}
static void __attribute__((constructor(101))) vmm_register_fork(void) { pthread_atfork(prepare, parent, child); }

static struct phys *find(CUmemGenericAllocationHandle h)
{
    for (int i = 0; i < g_nphys; i++)
        if (g_phys[i].h == h)
            return &g_phys[i];
    return NULL;
}

/* Caller holds g_mu. */
static void maybe_free(struct phys *p)
{
    if (p->refs || p->maps)
        return;
    lb_region_release(p->dev, p->size);
    *p = g_phys[--g_nphys];
}

static void __attribute__((noinline, cold)) log_full(const char *what)
{
    if (!atomic_exchange(&g_full_logged, 1))
        LB_ERROR("more than %s: further VMM memory stays charged until the process exits", what);
}

/* 1 enforce, 0 pass through, -1 a signal handler inside one of our hooks (guard.h). */
static int enforcing(const void *ra)
{
    if (lb_guard)
        return lb_guarded(ra);
    return lb_active();
}

#define REAL_OR_FAIL(w)                                                                                             \
    __typeof__(&w) real = LB_REAL(w);                                                                               \
    if (!real)                                                                                                      \
        return CUDA_ERROR_NOT_FOUND

LB_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags)
{
    REAL_OR_FAIL(cuMemCreate);
    int e = enforcing(__builtin_return_address(0));
    if (e < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!e || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0)
        return real(handle, size, prop, flags); /* host-located or invalid: the driver decides */
    int dev = lb_phys_index(prop->location.id);
    if (dev < 0 || dev >= LB_REGION_MAX_DEVICES) {
        LB_WARN("cuMemCreate: CUDA device %d: refused: the library cannot tell which GPU it is", prop->location.id);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!lb_region || !lb_region_reserve(dev, size)) {
        if (!lb_region)
            lb_log_no_region("cuMemCreate");
        else
            LB_WARN("cuMemCreate: device %d: %zu bytes refused: the container uses %llu of its %llu-byte limit", dev, size,
                    (unsigned long long)lb_region_usage(dev), (unsigned long long)lb_region_limit(dev));
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    lb_guard_enter();
    CUresult r = real(handle, size, prop, flags);
    lb_guard_leave();
    if (r != CUDA_SUCCESS) {
        lb_region_release(dev, size);
        return r;
    }
    pthread_mutex_lock(&g_mu);
    if (g_nphys < MAX_PHYS)
        g_phys[g_nphys++] = (struct phys){*handle, size, dev, 1, 0};
    else
        log_full("4096 live cuMemCreate allocations");
    pthread_mutex_unlock(&g_mu);
    return r;
}

LB_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    REAL_OR_FAIL(cuMemRelease);
    if (enforcing(__builtin_return_address(0)) <= 0)
        return real(handle); /* a signal handler's release stays charged: over, never under */
    lb_guard_enter();
    CUresult r = real(handle);
    lb_guard_leave();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&g_mu);
    struct phys *p = find(handle);
    if (p && p->refs) {
        p->refs--;
        maybe_free(p);
    }
    pthread_mutex_unlock(&g_mu);
    return r;
}

LB_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    REAL_OR_FAIL(cuMemRetainAllocationHandle);
    int e = enforcing(__builtin_return_address(0));
    if (e < 0)
        return CUDA_ERROR_NOT_PERMITTED; /* a reference we could not count */
    if (!e)
        return real(handle, addr);
    lb_guard_enter();
    CUresult r = real(handle, addr);
    lb_guard_leave();
    if (r != CUDA_SUCCESS || !handle)
        return r;
    pthread_mutex_lock(&g_mu);
    struct phys *p = find(*handle);
    if (p)
        p->refs++;
    pthread_mutex_unlock(&g_mu);
    return r;
}

LB_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                            unsigned long long flags)
{
    REAL_OR_FAIL(cuMemMap);
    int e = enforcing(__builtin_return_address(0));
    if (e < 0)
        return CUDA_ERROR_NOT_PERMITTED; /* a mapping we could not count */
    if (!e)
        return real(ptr, size, offset, handle, flags);
    lb_guard_enter();
    CUresult r = real(ptr, size, offset, handle, flags);
    lb_guard_leave();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&g_mu);
    struct phys *p = find(handle);
    if (p && g_nmaps < MAX_MAPS) {
        g_maps[g_nmaps++] = (struct map){ptr, size, handle};
        p->maps++;
    } else if (p) {
        p->refs++; /* never released by us again: stays charged (never under-counted) */
        log_full("16384 live cuMemMap mappings");
    }
    pthread_mutex_unlock(&g_mu);
    return r;
}

/* The driver unmaps whole mappings inside [ptr, ptr + size). */
LB_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    REAL_OR_FAIL(cuMemUnmap);
    if (enforcing(__builtin_return_address(0)) <= 0)
        return real(ptr, size);
    lb_guard_enter();
    CUresult r = real(ptr, size);
    lb_guard_leave();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_nmaps;) {
        struct map *m = &g_maps[i];
        if (m->va < ptr || m->va - ptr >= size) {
            i++;
            continue;
        }
        struct phys *p = find(m->h);
        *m = g_maps[--g_nmaps];
        if (p && p->maps) {
            p->maps--;
            maybe_free(p);
        }
    }
    pthread_mutex_unlock(&g_mu);
    return r;
}
