/*
 * The VMM family with the driver's lifetimes: the physical memory of cuMemCreate lives while
 * its handle has a reference (cuMemCreate, cuMemRetainAllocationHandle; cuMemRelease drops one)
 * OR a mapping (cuMemMap; cuMemUnmap drops it). It is charged at cuMemCreate, before the driver
 * is called, and released when the last of both goes: create → map → release right away, the
 * documented pattern, stays charged until the unmap.
 *
 * Bookkeeping: fixed arrays (4096 allocations, 16384 mappings) under one mutex, never held across
 * a driver call. Host-located allocations are followed but not charged. A full table refuses the
 * allocation or the mapping before the driver is called; a mapping of a handle the library never
 * saw made (it could not be charged) is refused too.
 *
 * An allocation another process exported as a file descriptor and this one imports
 * (cuMemImportFromShareableHandle) lives, by the driver's rules, while any process holds a handle
 * or a mapping of it: the importer is charged its whole size from the import on, as if it had
 * created it. The driver has no call that tells an imported handle's size; mapping it tells it:
 * cuMemMap accepts no more than the allocation (the documentation allows less; the driver, only the
 * whole of it), so the size is the largest mapping it accepts: a binary search over a reserved
 * range, in granules, then every size in turn when the search found none (whole-only mappings).
 */
#include <pthread.h>
#include <stdatomic.h>

#include "ctxcache.h"
#include "devmap.h"
#include "guard.h"
#include "init.h"
#include "log.h"
#include "noregion.h"
#include "region.h"
#include "symbols.h"

#define MAX_PHYS 4096
#define MAX_MAPS 16384

struct phys {
    CUmemGenericAllocationHandle h;
    uint64_t size;
    int dev; /* its GPU (region index); -1: host memory, not charged */
    unsigned refs, maps;
};

struct map {
    CUdeviceptr va;
    uint64_t size;
    CUmemGenericAllocationHandle h;
};

static struct phys g_phys[MAX_PHYS];
static struct map g_maps[MAX_MAPS];
static int g_nphys, g_nmaps, g_pending; /* g_pending: places taken by allocations in the driver */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_full_logged;

static void prepare(void) { pthread_mutex_lock(&g_mu); }
static void parent(void) { pthread_mutex_unlock(&g_mu); }
/* The child owns none of the parent's GPU memory: empty tables, in O(1). */
static void child(void)
{
    g_nphys = g_nmaps = g_pending = 0;
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
    if (p->dev >= 0)
        lb_region_release(p->dev, p->size);
    *p = g_phys[--g_nphys];
}

static void __attribute__((noinline, cold)) log_full(const char *what)
{
    if (!atomic_exchange(&g_full_logged, 1))
        LB_ERROR("more than %s: further ones are refused", what);
}

/* A place in the allocation table, taken before the driver is called; 0: full. */
static int take_place(void)
{
    lb_lock(&g_mu);
    int ok = g_nphys + g_pending < MAX_PHYS;
    g_pending += ok;
    lb_unlock(&g_mu);
    if (!ok)
        log_full("4096 live VMM allocations");
    return ok;
}

/* Settle a place taken by take_place: the new allocation (r == CUDA_SUCCESS) or nothing. */
static void settle_place(CUresult r, CUmemGenericAllocationHandle h, uint64_t size, int dev)
{
    lb_lock(&g_mu);
    g_pending--;
    if (r == CUDA_SUCCESS)
        g_phys[g_nphys++] = (struct phys){h, size, dev, 1, 0};
    lb_unlock(&g_mu);
}

/* 1 enforce, 0 pass through, -1 a signal handler inside one of our hooks (guard.h). */
static int enforcing(const void *ra)
{
    if (lb_guard)
        return lb_guarded(ra);
    return lb_active();
}


static int reserve_on(int dev, uint64_t size, const char *api)
{
    if (!lb_region) {
        lb_log_no_region(api);
        return 0;
    }
    if (lb_region_reserve(dev, size))
        return 1;
    LB_WARN("%s: device %d: %llu bytes refused: the container uses %llu of its %llu-byte limit", api, dev,
            (unsigned long long)size, (unsigned long long)lb_region_usage(dev),
            (unsigned long long)lb_region_limit(dev));
    return 0;
}

LB_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags)
{
    REAL_OR_FAIL(cuMemCreate);
    int e = enforcing(__builtin_return_address(0));
    if (e < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!e || !prop || !handle)
        return real(handle, size, prop, flags); /* invalid: the driver decides */
    int dev = -1;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        dev = prop->location.id >= 0 ? lb_phys_index(prop->location.id) : -1;
        if (dev < 0 || dev >= LB_REGION_MAX_DEVICES) {
            LB_WARN("cuMemCreate: CUDA device %d: refused: the library cannot tell which GPU it is", prop->location.id);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (!take_place())
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (dev >= 0 && !reserve_on(dev, size, "cuMemCreate")) {
        settle_place(CUDA_ERROR_OUT_OF_MEMORY, 0, 0, dev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    lb_guard_enter();
    CUresult r = real(handle, size, prop, flags);
    lb_guard_leave();
    if (r != CUDA_SUCCESS && dev >= 0)
        lb_region_release(dev, size);
    settle_place(r, r == CUDA_SUCCESS ? *handle : 0, dev >= 0 ? size : 0, dev);
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
    lb_lock(&g_mu);
    struct phys *p = find(handle);
    if (p && p->refs) {
        p->refs--;
        maybe_free(p);
    }
    lb_unlock(&g_mu);
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
    lb_lock(&g_mu);
    struct phys *p = find(*handle);
    if (p)
        p->refs++;
    lb_unlock(&g_mu);
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
    /* A mapping keeps its allocation alive: it needs a place, and an allocation we follow. */
    lb_lock(&g_mu);
    int known = find(handle) != NULL, room = g_nmaps < MAX_MAPS;
    lb_unlock(&g_mu);
    if (!known || !room) {
        if (!room)
            log_full("16384 live VMM mappings");
        else
            LB_WARN("cuMemMap: refused: handle %llu was not made through the library, so its memory is not charged",
                    (unsigned long long)handle);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    lb_guard_enter();
    CUresult r = real(ptr, size, offset, handle, flags);
    lb_guard_leave();
    if (r != CUDA_SUCCESS)
        return r;
    lb_lock(&g_mu);
    struct phys *p = find(handle);
    if (p && g_nmaps < MAX_MAPS) {
        g_maps[g_nmaps++] = (struct map){ptr, size, handle};
        p->maps++;
    } else if (p) {
        p->refs++; /* a racing thread took the last place: stays charged (never under-counted) */
    }
    lb_unlock(&g_mu);
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
    lb_lock(&g_mu);
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
    lb_unlock(&g_mu);
    return r;
}

/* The size of an imported allocation: the largest mapping of it the driver accepts, in whole
 * granules, at a range reserved for the search. 0: not found. Guarded driver calls. */
static uint64_t probe_size(CUmemGenericAllocationHandle h, const CUmemAllocationProp *prop, int ord)
{
    __typeof__(&cuMemGetAllocationGranularity) gran = LB_REAL(cuMemGetAllocationGranularity);
    __typeof__(&cuMemAddressReserve) reserve = LB_REAL(cuMemAddressReserve);
    __typeof__(&cuMemAddressFree) unreserve = LB_REAL(cuMemAddressFree);
    __typeof__(&cuMemMap) map = LB_REAL(cuMemMap);
    __typeof__(&cuMemUnmap) unmap = LB_REAL(cuMemUnmap);
    __typeof__(&cuDeviceTotalMem_v2) total = LB_REAL(cuDeviceTotalMem_v2);
    size_t g = 0, mem = 0;
    CUdeviceptr va;
    if (!gran || !reserve || !unreserve || !map || !unmap || !total || total(&mem, ord) != CUDA_SUCCESS ||
        gran(&g, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !g || mem < g)
        return 0;
    uint64_t hi = mem / g, lo = 0; /* in granules: lo maps, hi + 1 does not */
    if (reserve(&va, hi * g, 0, 0, 0) != CUDA_SUCCESS)
        return 0;
    uint64_t n = hi;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo + 1) / 2;
        if (map(va, mid * g, 0, h, 0) == CUDA_SUCCESS) {
            (void)unmap(va, mid * g);
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    /* A driver that maps only the whole allocation (580 on an H200 refuses any other size) answers
     * the search only where it happened on the size: then every size in turn, from the smallest. */
    for (uint64_t k = 1; !lo && k <= n; k++) {
        if (map(va, k * g, 0, h, 0) == CUDA_SUCCESS) {
            (void)unmap(va, k * g);
            lo = k;
        }
    }
    (void)unreserve(va, n * g);
    return lo * g;
}

LB_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
    REAL_OR_FAIL(cuMemImportFromShareableHandle);
    int e = enforcing(__builtin_return_address(0));
    if (e < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!e || !handle)
        return real(handle, osHandle, shHandleType);
    if (!take_place())
        return CUDA_ERROR_OUT_OF_MEMORY;
    __typeof__(&cuMemGetAllocationPropertiesFromHandle) props = LB_REAL(cuMemGetAllocationPropertiesFromHandle);
    __typeof__(&cuMemRelease) release = LB_REAL(cuMemRelease);
    CUmemAllocationProp prop;
    uint64_t size = 0;
    int dev = -1, ok = 0;
    lb_guard_enter();
    CUresult r = real(handle, osHandle, shHandleType);
    if (r == CUDA_SUCCESS && props && props(&prop, *handle) == CUDA_SUCCESS) {
        if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            ok = 1; /* host memory: followed, not charged */
        else if ((dev = lb_phys_index(prop.location.id)) >= 0 && dev < LB_REGION_MAX_DEVICES)
            ok = (size = probe_size(*handle, &prop, prop.location.id)) > 0;
    }
    lb_guard_leave();
    if (r != CUDA_SUCCESS) {
        settle_place(r, 0, 0, -1);
        return r;
    }
    lb_lock(&g_mu);
    struct phys *mine = find(*handle); /* imported here before: the driver's same handle, one more reference */
    if (mine)
        mine->refs++;
    lb_unlock(&g_mu);
    if (mine) {
        settle_place(CUDA_ERROR_INVALID_VALUE, 0, 0, -1);
        return r;
    }
    if (!ok || (dev >= 0 && !reserve_on(dev, size, "cuMemImportFromShareableHandle"))) {
        if (!ok)
            LB_WARN("cuMemImportFromShareableHandle: refused: the size or the GPU of the imported allocation cannot be "
                    "told");
        if (release) {
            lb_guard_enter();
            (void)release(*handle);
            lb_guard_leave();
        }
        settle_place(CUDA_ERROR_OUT_OF_MEMORY, 0, 0, -1);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    settle_place(CUDA_SUCCESS, *handle, size, ok && dev >= 0 ? dev : -1);
    return r;
}
