/*
 * Device-memory hooks. Every allocation of the cuMemAlloc family is charged to the device of the
 * current context (cuMemCreate: the device of its location) BEFORE the driver is called: the
 * reservation is atomic across threads and processes (region.c), and rolled back if the driver
 * fails. Over the limit, CUDA_ERROR_OUT_OF_MEMORY is returned without calling the driver.
 *
 * Frees are matched through per-process tables value -> (size, device) in static memory: open
 * addressing, lock-free (CAS on the key), tombstones on removal, no allocation. Freeing an unknown
 * pointer is passed to the driver unchanged (its error, not ours).
 *
 * Only what the process allocates through these APIs is counted: context, module and driver
 * overheads are not, so a limit means the same number of bytes on every driver (docs/hamicore.md).
 */
#include "memory.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "context.h"
#include "init.h"
#include "log.h"
#include "region.h"
#include "symbols.h"

#define K_EMPTY 0u
#define K_TOMB 1u

struct entry {
    _Atomic uint64_t key; /* value + 2; K_EMPTY / K_TOMB */
    _Atomic uint64_t size;
    _Atomic int32_t dev;
    int32_t pad;
};

/* Constant descriptors, so that the inlined lookups see the table size as a constant. */
struct table {
    struct entry *e;
    uint32_t bits;
    const char *what;
    _Atomic int *full_logged;
};

static struct entry g_ptr_e[1u << 16], g_handle_e[1u << 12], g_array_e[1u << 12];
static _Atomic int g_full_logged[3];
static const struct table g_ptrs = {g_ptr_e, 16, "device pointers", &g_full_logged[0]};
static const struct table g_handles = {g_handle_e, 12, "cuMemCreate handles", &g_full_logged[1]};
static const struct table g_arrays = {g_array_e, 12, "CUDA arrays", &g_full_logged[2]};

static inline uint32_t slot_of(const struct table *t, uint64_t k)
{
    return (uint32_t)((k * 0x9E3779B97F4A7C15ULL) >> (64 - t->bits));
}

static void __attribute__((noinline, cold)) log_full(const struct table *t)
{
    if (!atomic_exchange(t->full_logged, 1))
        LB_ERROR("more than %u live %s: further ones stay charged until the process exits", 1u << t->bits, t->what);
}

static inline int track(const struct table *t, uint64_t value, uint64_t size, int dev)
{
    uint64_t k = value + 2;
    if (k < 2)
        return -1;
    uint32_t mask = (1u << t->bits) - 1, h = slot_of(t, k);
    for (uint32_t i = 0; i <= mask; i++) {
        struct entry *e = &t->e[(h + i) & mask];
        uint64_t cur = atomic_load_explicit(&e->key, memory_order_relaxed);
        if (cur != K_EMPTY && cur != K_TOMB)
            continue;
        atomic_store_explicit(&e->size, size, memory_order_relaxed);
        atomic_store_explicit(&e->dev, dev, memory_order_relaxed);
        if (atomic_compare_exchange_strong_explicit(&e->key, &cur, k, memory_order_release, memory_order_relaxed))
            return 0;
    }
    log_full(t);
    return -1;
}

static inline int untrack(const struct table *t, uint64_t value, uint64_t *size, int *dev)
{
    uint64_t k = value + 2;
    if (k < 2)
        return 0;
    uint32_t mask = (1u << t->bits) - 1, h = slot_of(t, k);
    for (uint32_t i = 0; i <= mask; i++) {
        struct entry *e = &t->e[(h + i) & mask];
        uint64_t cur = atomic_load_explicit(&e->key, memory_order_acquire);
        if (cur == K_EMPTY)
            return 0;
        if (cur != k)
            continue;
        *size = atomic_load_explicit(&e->size, memory_order_relaxed);
        *dev = atomic_load_explicit(&e->dev, memory_order_relaxed);
        if (atomic_compare_exchange_strong(&e->key, &cur, K_TOMB))
            return 1;
        return 0; /* freed concurrently by another thread: the other one accounts it */
    }
    return 0;
}

void lb_memory_after_fork(void)
{
    /* The parent's allocations are not the child's to free. Static tables, cleared in place. */
    memset(g_ptr_e, 0, sizeof g_ptr_e);
    memset(g_handle_e, 0, sizeof g_handle_e);
    memset(g_array_e, 0, sizeof g_array_e);
}

/* The shape every allocation wrapper shares:
 *     st = charge_*(&c, ...)        pass through uncharged / refused / reserved
 *     guarded driver call           (lb_guard_enter/leave around it)
 *     return charge_settle(...)     roll back on failure, track the new handle on success
 * The driver is called with the reentrancy guard up: a driver whose entry points call each other
 * through their exported names (e.g. an _ptsz variant calling the plain one) reaches our wrappers
 * again, and those must pass straight through instead of counting twice. */
enum { CH_PASS, CH_REFUSED, CH_HELD };

struct charge {
    int dev;
    uint64_t bytes;
};

static inline int enforcing(void) { return !lb_guard && lb_active(); }

static void __attribute__((noinline, cold)) log_refusal(const char *api, int dev, uint64_t bytes)
{
    /* Read again for the message only: other processes may have moved since the refusal. */
    LB_WARN("%s: device %d: %llu bytes refused: the container uses %llu of its %llu-byte limit", api, dev,
            (unsigned long long)bytes, (unsigned long long)lb_region_usage(dev),
            (unsigned long long)lb_region_limit(dev));
}

/* Reserve on a known device. */
static inline int charge_dev(struct charge *c, const char *api, int dev, uint64_t bytes)
{
    c->dev = dev;
    c->bytes = bytes;
    if (lb_region_reserve(dev, bytes))
        return CH_HELD;
    log_refusal(api, dev, bytes);
    return CH_REFUSED;
}

/* Reserve on the device of the current context; no context: pass through (the driver refuses). */
static inline int charge_cur(struct charge *c, const char *api, uint64_t bytes)
{
    int dev;
    if (!enforcing() || lb_cur_device(&dev) != 0)
        return CH_PASS;
    return charge_dev(c, api, dev, bytes);
}

static inline CUresult charge_settle(const struct charge *c, const struct table *t, CUresult r, uint64_t value)
{
    if (r != CUDA_SUCCESS)
        lb_region_release(c->dev, c->bytes);
    else
        (void)track(t, value, c->bytes, c->dev); /* table full: stays charged (never under-counted) */
    return r;
}

/* Frees: 1 if the value was ours to account (then the driver is called guarded). */
static inline int uncharge_begin(struct charge *c, const struct table *t, uint64_t value)
{
    return enforcing() && untrack(t, value, &c->bytes, &c->dev);
}

static inline CUresult uncharge_settle(const struct charge *c, const struct table *t, uint64_t value, CUresult r)
{
    if (r == CUDA_SUCCESS)
        lb_region_release(c->dev, c->bytes);
    else
        (void)track(t, value, c->bytes, c->dev); /* still allocated */
    return r;
}

#define REAL_OR_FAIL(w)                                                                                             \
    __typeof__(&w) real = LB_REAL(w);                                                                               \
    if (!real)                                                                                                      \
        return CUDA_ERROR_NOT_FOUND

LB_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    REAL_OR_FAIL(cuMemAlloc_v2);
    struct charge c;
    int st = charge_cur(&c, "cuMemAlloc", bytesize);
    if (st != CH_HELD)
        return st == CH_PASS ? real(dptr, bytesize) : CUDA_ERROR_OUT_OF_MEMORY;
    lb_guard_enter();
    CUresult r = real(dptr, bytesize);
    lb_guard_leave();
    return charge_settle(&c, &g_ptrs, r, r == CUDA_SUCCESS ? *dptr : 0);
}

CUresult lbw_cuMemAlloc_v1(lb_deviceptr_v1 *dptr, unsigned int bytesize)
{
    REAL_OR_FAIL(lbw_cuMemAlloc_v1);
    struct charge c;
    int st = charge_cur(&c, "cuMemAlloc", bytesize);
    if (st != CH_HELD)
        return st == CH_PASS ? real(dptr, bytesize) : CUDA_ERROR_OUT_OF_MEMORY;
    lb_guard_enter();
    CUresult r = real(dptr, bytesize);
    lb_guard_leave();
    return charge_settle(&c, &g_ptrs, r, r == CUDA_SUCCESS ? *dptr : 0);
}

LB_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    REAL_OR_FAIL(cuMemAllocManaged);
    struct charge c;
    int st = charge_cur(&c, "cuMemAllocManaged", bytesize);
    if (st != CH_HELD)
        return st == CH_PASS ? real(dptr, bytesize, flags) : CUDA_ERROR_OUT_OF_MEMORY;
    lb_guard_enter();
    CUresult r = real(dptr, bytesize, flags);
    lb_guard_leave();
    return charge_settle(&c, &g_ptrs, r, r == CUDA_SUCCESS ? *dptr : 0);
}

LB_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    REAL_OR_FAIL(cuMemAllocAsync);
    struct charge c;
    int st = charge_cur(&c, "cuMemAllocAsync", bytesize);
    if (st != CH_HELD)
        return st == CH_PASS ? real(dptr, bytesize, hStream) : CUDA_ERROR_OUT_OF_MEMORY;
    lb_guard_enter();
    CUresult r = real(dptr, bytesize, hStream);
    lb_guard_leave();
    return charge_settle(&c, &g_ptrs, r, r == CUDA_SUCCESS ? *dptr : 0);
}

LB_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    REAL_OR_FAIL(cuMemAllocAsync_ptsz);
    struct charge c;
    int st = charge_cur(&c, "cuMemAllocAsync", bytesize);
    if (st != CH_HELD)
        return st == CH_PASS ? real(dptr, bytesize, hStream) : CUDA_ERROR_OUT_OF_MEMORY;
    lb_guard_enter();
    CUresult r = real(dptr, bytesize, hStream);
    lb_guard_leave();
    return charge_settle(&c, &g_ptrs, r, r == CUDA_SUCCESS ? *dptr : 0);
}

LB_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    REAL_OR_FAIL(cuMemAllocFromPoolAsync);
    struct charge c;
    int st = charge_cur(&c, "cuMemAllocFromPoolAsync", bytesize);
    if (st != CH_HELD)
        return st == CH_PASS ? real(dptr, bytesize, pool, hStream) : CUDA_ERROR_OUT_OF_MEMORY;
    lb_guard_enter();
    CUresult r = real(dptr, bytesize, pool, hStream);
    lb_guard_leave();
    return charge_settle(&c, &g_ptrs, r, r == CUDA_SUCCESS ? *dptr : 0);
}

LB_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                CUstream hStream)
{
    REAL_OR_FAIL(cuMemAllocFromPoolAsync_ptsz);
    struct charge c;
    int st = charge_cur(&c, "cuMemAllocFromPoolAsync", bytesize);
    if (st != CH_HELD)
        return st == CH_PASS ? real(dptr, bytesize, pool, hStream) : CUDA_ERROR_OUT_OF_MEMORY;
    lb_guard_enter();
    CUresult r = real(dptr, bytesize, pool, hStream);
    lb_guard_leave();
    return charge_settle(&c, &g_ptrs, r, r == CUDA_SUCCESS ? *dptr : 0);
}

static int prop_device(const CUmemAllocationProp *prop, int *dev)
{
    if (!prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
        prop->location.id >= LB_REGION_MAX_DEVICES)
        return -1; /* host-located or invalid: the driver decides */
    *dev = prop->location.id;
    return 0;
}

LB_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags)
{
    REAL_OR_FAIL(cuMemCreate);
    struct charge c;
    int dev;
    if (!enforcing() || prop_device(prop, &dev) != 0)
        return real(handle, size, prop, flags);
    if (charge_dev(&c, "cuMemCreate", dev, size) != CH_HELD)
        return CUDA_ERROR_OUT_OF_MEMORY;
    lb_guard_enter();
    CUresult r = real(handle, size, prop, flags);
    lb_guard_leave();
    return charge_settle(&c, &g_handles, r, r == CUDA_SUCCESS ? *handle : 0);
}

static uint64_t format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2;
    default: return 4;
    }
}

/* Bytes of an array: width x height x depth x channels x element size (saturating). */
static uint64_t array_bytes(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch)
{
    uint64_t b = format_bytes(f), r;
    uint64_t dims[4] = {w, h ? h : 1, d ? d : 1, ch ? ch : 1};
    for (int i = 0; i < 4; i++) {
        if (__builtin_mul_overflow(b, dims[i], &r))
            return UINT64_MAX;
        b = r;
    }
    return b;
}

LB_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    REAL_OR_FAIL(cuArrayCreate_v2);
    if (!d || !pHandle)
        return real(pHandle, d);
    struct charge c;
    int st = charge_cur(&c, "cuArrayCreate", array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels));
    if (st != CH_HELD)
        return st == CH_PASS ? real(pHandle, d) : CUDA_ERROR_OUT_OF_MEMORY;
    lb_guard_enter();
    CUresult r = real(pHandle, d);
    lb_guard_leave();
    return charge_settle(&c, &g_arrays, r, r == CUDA_SUCCESS ? (uintptr_t)*pHandle : 0);
}

LB_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    REAL_OR_FAIL(cuArray3DCreate_v2);
    if (!d || !pHandle)
        return real(pHandle, d);
    struct charge c;
    int st = charge_cur(&c, "cuArray3DCreate", array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels));
    if (st != CH_HELD)
        return st == CH_PASS ? real(pHandle, d) : CUDA_ERROR_OUT_OF_MEMORY;
    lb_guard_enter();
    CUresult r = real(pHandle, d);
    lb_guard_leave();
    return charge_settle(&c, &g_arrays, r, r == CUDA_SUCCESS ? (uintptr_t)*pHandle : 0);
}

LB_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                      unsigned int ElementSizeBytes)
{
    REAL_OR_FAIL(cuMemAllocPitch_v2);
    if (!dptr || !pPitch)
        return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    /* The pitch is only known afterwards: reserve width x height, then settle the difference. */
    uint64_t est;
    if (__builtin_mul_overflow((uint64_t)WidthInBytes, (uint64_t)Height, &est))
        est = UINT64_MAX;
    struct charge c, extra;
    int st = charge_cur(&c, "cuMemAllocPitch", est);
    if (st != CH_HELD)
        return st == CH_PASS ? real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes) : CUDA_ERROR_OUT_OF_MEMORY;
    lb_guard_enter();
    CUresult r = real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    lb_guard_leave();
    if (r != CUDA_SUCCESS)
        return charge_settle(&c, &g_ptrs, r, 0);
    uint64_t actual = (uint64_t)*pPitch * Height;
    if (actual > est) {
        if (charge_dev(&extra, "cuMemAllocPitch", c.dev, actual - est) != CH_HELD) {
            __typeof__(&cuMemFree_v2) fr = LB_REAL(cuMemFree_v2);
            if (fr) {
                lb_guard_enter();
                (void)fr(*dptr);
                lb_guard_leave();
            }
            lb_region_release(c.dev, est);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    } else if (actual < est) {
        lb_region_release(c.dev, est - actual);
    }
    c.bytes = actual;
    return charge_settle(&c, &g_ptrs, CUDA_SUCCESS, *dptr);
}

LB_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    REAL_OR_FAIL(cuMemFree_v2);
    struct charge c;
    if (!uncharge_begin(&c, &g_ptrs, dptr))
        return real(dptr);
    lb_guard_enter();
    CUresult r = real(dptr);
    lb_guard_leave();
    return uncharge_settle(&c, &g_ptrs, dptr, r);
}

CUresult lbw_cuMemFree_v1(lb_deviceptr_v1 dptr)
{
    REAL_OR_FAIL(lbw_cuMemFree_v1);
    struct charge c;
    if (!uncharge_begin(&c, &g_ptrs, dptr))
        return real(dptr);
    lb_guard_enter();
    CUresult r = real(dptr);
    lb_guard_leave();
    return uncharge_settle(&c, &g_ptrs, dptr, r);
}

LB_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    REAL_OR_FAIL(cuMemFreeAsync);
    struct charge c;
    if (!uncharge_begin(&c, &g_ptrs, dptr))
        return real(dptr, hStream);
    lb_guard_enter();
    CUresult r = real(dptr, hStream);
    lb_guard_leave();
    return uncharge_settle(&c, &g_ptrs, dptr, r);
}

LB_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    REAL_OR_FAIL(cuMemFreeAsync_ptsz);
    struct charge c;
    if (!uncharge_begin(&c, &g_ptrs, dptr))
        return real(dptr, hStream);
    lb_guard_enter();
    CUresult r = real(dptr, hStream);
    lb_guard_leave();
    return uncharge_settle(&c, &g_ptrs, dptr, r);
}

LB_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    REAL_OR_FAIL(cuMemRelease);
    struct charge c;
    if (!uncharge_begin(&c, &g_handles, handle))
        return real(handle);
    lb_guard_enter();
    CUresult r = real(handle);
    lb_guard_leave();
    return uncharge_settle(&c, &g_handles, handle, r);
}

LB_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
    REAL_OR_FAIL(cuArrayDestroy);
    struct charge c;
    if (!uncharge_begin(&c, &g_arrays, (uintptr_t)hArray))
        return real(hArray);
    lb_guard_enter();
    CUresult r = real(hArray);
    lb_guard_leave();
    return uncharge_settle(&c, &g_arrays, (uintptr_t)hArray, r);
}

LB_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    REAL_OR_FAIL(cuMemGetInfo_v2);
    if (!enforcing())
        return real(free, total);
    lb_guard_enter();
    CUresult r = real(free, total);
    lb_guard_leave();
    int dev;
    if (r != CUDA_SUCCESS || lb_cur_device(&dev) != 0)
        return r;
    uint64_t lim = lb_region_limit(dev);
    if (lim == LB_MEM_UNLIMITED)
        return r;
    uint64_t used = lb_region_usage(dev);
    uint64_t avail = lim > used ? lim - used : 0; /* never an underflow */
    if (free && *free > avail)
        *free = (size_t)avail;
    if (total)
        *total = (size_t)lim;
    return r;
}

LB_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    REAL_OR_FAIL(cuDeviceTotalMem_v2);
    if (!enforcing())
        return real(bytes, dev);
    lb_guard_enter();
    CUresult r = real(bytes, dev);
    lb_guard_leave();
    if (r != CUDA_SUCCESS || !bytes || dev < 0 || dev >= LB_REGION_MAX_DEVICES)
        return r;
    uint64_t lim = lb_region_limit(dev);
    if (lim != LB_MEM_UNLIMITED)
        *bytes = (size_t)lim;
    return r;
}
