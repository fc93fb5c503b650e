/*
 * Device-memory hooks. Every allocation of the cuMemAlloc family is charged to the device of the
 * current context (cuMemCreate: the device of its location) BEFORE the driver is called: the
 * reservation is atomic across threads and processes (region.c), and rolled back if the driver
 * fails. Over the limit, CUDA_ERROR_OUT_OF_MEMORY is returned without calling the driver.
 *
 * Frees are matched through per-process tables (charge.h). Freeing an unknown pointer is passed to
 * the driver unchanged (its error, not ours).
 *
 * Only what the process allocates through these APIs is counted: context, module and driver
 * overheads are not, so a limit means the same number of bytes on every driver (docs/hamicore.md).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "charge.h"
#include "devmap.h"
#include "graph.h"
#include "log.h"

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

/* Every level: level l is max(1, dim >> l) in each dimension. */
static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
    uint64_t total = 0;
    for (unsigned l = 0; l < levels && l < 64; l++) {
        size_t w = d->Width >> l, h = d->Height >> l, z = d->Depth >> l;
        uint64_t b = array_bytes(w ? w : 1, h ? h : 1, z ? z : 1, d->Format, d->NumChannels);
        if (__builtin_add_overflow(total, b, &total))
            return UINT64_MAX;
    }
    return total;
}

/* The pitch is only known afterwards: reserve width x height, then settle the difference (the
 * v2 entry point and the legacy one with 32-bit pointers and pitch share this). */
struct pitch_call {
    uint64_t ptr, pitch;
    CUresult (*call)(struct pitch_call *, void *);
    CUresult (*free)(uint64_t);
    void *args;
};

static CUresult pitch_alloc(struct pitch_call *pc, uint64_t width, uint64_t height, const void *ra)
{
    uint64_t est;
    if (__builtin_mul_overflow(width, height, &est))
        est = UINT64_MAX;
    struct charge c, extra;
    int st = charge_take(&c, &g_ptrs, "cuMemAllocPitch", est, ra);
    if (st != CH_HELD)
        return st == CH_PASS ? pc->call(pc, pc->args) : CUDA_ERROR_OUT_OF_MEMORY;
    lb_guard_enter();
    CUresult r = pc->call(pc, pc->args);
    lb_guard_leave();
    if (r != CUDA_SUCCESS)
        return charge_settle(&c, &g_ptrs, r, 0);
    uint64_t actual = pc->pitch * height;
    if (actual > est) {
        if (charge_dev(&extra, "cuMemAllocPitch", c.dev, actual - est) != CH_HELD) {
            lb_guard_enter();
            (void)pc->free(pc->ptr);
            lb_guard_leave();
            return charge_settle(&c, &g_ptrs, CUDA_ERROR_OUT_OF_MEMORY, 0);
        }
    } else if (actual < est) {
        lb_region_release(c.dev, est - actual);
    }
    c.bytes = actual;
    return charge_settle(&c, &g_ptrs, CUDA_SUCCESS, pc->ptr);
}

struct pitch_v2 {
    CUdeviceptr *dptr;
    size_t *pitch, w, h;
    unsigned el;
    __typeof__(&cuMemAllocPitch_v2) real;
};

static CUresult call_v2(struct pitch_call *pc, void *a)
{
    struct pitch_v2 *v = a;
    CUresult r = v->real(v->dptr, v->pitch, v->w, v->h, v->el);
    if (r == CUDA_SUCCESS)
        pc->ptr = *v->dptr, pc->pitch = *v->pitch;
    return r;
}

static CUresult free_v2(uint64_t p)
{
    __typeof__(&cuMemFree_v2) fr = LB_REAL(cuMemFree_v2);
    return fr ? fr((CUdeviceptr)p) : CUDA_ERROR_NOT_FOUND;
}

LB_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                      unsigned int ElementSizeBytes)
{
    REAL_OR_FAIL(cuMemAllocPitch_v2);
    if (!dptr || !pPitch)
        return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    struct pitch_v2 v = {dptr, pPitch, WidthInBytes, Height, ElementSizeBytes, real};
    struct pitch_call pc = {0, 0, call_v2, free_v2, &v};
    return pitch_alloc(&pc, WidthInBytes, Height, __builtin_return_address(0));
}

struct pitch_v1 {
    CUdeviceptr_v1 *dptr;
    unsigned *pitch, w, h, el;
    __typeof__(&lbw_cuMemAllocPitch_v1) real;
};

static CUresult call_v1(struct pitch_call *pc, void *a)
{
    struct pitch_v1 *v = a;
    CUresult r = v->real(v->dptr, v->pitch, v->w, v->h, v->el);
    if (r == CUDA_SUCCESS)
        pc->ptr = *v->dptr, pc->pitch = *v->pitch;
    return r;
}

static CUresult free_v1(uint64_t p)
{
    __typeof__(&lbw_cuMemFree_v1) fr = LB_REAL(lbw_cuMemFree_v1);
    return fr ? fr((CUdeviceptr_v1)p) : CUDA_ERROR_NOT_FOUND;
}

LB_EXPORT CUresult lbw_cuMemAllocPitch_v1(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                                          unsigned int Height, unsigned int ElementSizeBytes)
{
    REAL_OR_FAIL(lbw_cuMemAllocPitch_v1);
    if (!dptr || !pPitch)
        return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    struct pitch_v1 v = {dptr, pPitch, WidthInBytes, Height, ElementSizeBytes, real};
    struct pitch_call pc = {0, 0, call_v1, free_v1, &v};
    return pitch_alloc(&pc, WidthInBytes, Height, __builtin_return_address(0));
}

/* The wrappers of one shape (allocs.def). */
#define LB_ALLOC(w, api, params, args, pass, bytes, out, table)                                                     \
    LB_EXPORT CUresult w params                                                                                     \
    {                                                                                                               \
        REAL_OR_FAIL(w);                                                                                            \
        if (pass)                                                                                                   \
            return real args;                                                                                       \
        struct charge c;                                                                                            \
        int st = charge_take(&c, &table, api, bytes, __builtin_return_address(0));                                 \
        if (st != CH_HELD)                                                                                          \
            return st == CH_PASS ? real args : CUDA_ERROR_OUT_OF_MEMORY;                                            \
        lb_guard_enter();                                                                                           \
        CUresult r = real args;                                                                                     \
        lb_guard_leave();                                                                                           \
        return charge_settle(&c, &table, r, r == CUDA_SUCCESS ? (uint64_t)(out) : 0);                               \
    }
#define LB_FREE(w, params, args, pass, key, table)                                                                  \
    LB_EXPORT CUresult w params                                                                                     \
    {                                                                                                               \
        REAL_OR_FAIL(w);                                                                                            \
        struct charge c;                                                                                            \
        if (pass)                                                                                                   \
            return real args;                                                                                       \
        if (!uncharge_begin(&c, &table, key, __builtin_return_address(0))) {                                        \
            CUresult r0 = real args;                                                                                \
            if (r0 == CUDA_SUCCESS && &table == &g_ptrs)                                                            \
                lb_graph_ptr_freed((CUdeviceptr)(key)); /* not ours: maybe a graph's allocation */                  \
            return r0;                                                                                              \
        }                                                                                                           \
        lb_guard_enter();                                                                                           \
        CUresult r = real args;                                                                                     \
        lb_guard_leave();                                                                                           \
        return uncharge_settle(&c, &table, key, r);                                                                 \
    }
#include "allocs.def"
#undef LB_ALLOC
#undef LB_FREE

LB_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    REAL_OR_FAIL(cuMemGetInfo_v2);
    if (enforcing(__builtin_return_address(0)) <= 0)
        return real(free, total);
    lb_guard_enter();
    CUresult r = real(free, total);
    lb_guard_leave();
    int dev, ord;
    if (r != CUDA_SUCCESS || lb_cur_mem(&dev, &ord) != 0)
        return r;
    uint64_t lim = lb_region_limit(dev);
    if (lim == LB_MEM_UNLIMITED)
        return r;
    lb_reserve_settle_all(dev); /* pools may have given memory back at a synchronisation */
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
    if (enforcing(__builtin_return_address(0)) <= 0)
        return real(bytes, dev);
    lb_guard_enter();
    CUresult r = real(bytes, dev);
    lb_guard_leave();
    int phys = r == CUDA_SUCCESS && bytes ? lb_phys_index(dev) : -1;
    if (phys < 0 || phys >= LB_REGION_MAX_DEVICES)
        return r;
    uint64_t lim = lb_region_limit(phys);
    if (lim != LB_MEM_UNLIMITED)
        *bytes = (size_t)lim;
    return r;
}
