/*
 * Device memory. Every device allocation gets a fake address and a charge in the shared state,
 * so that other processes see it (cuMemGetInfo, NVML) and the device runs out like a real one.
 *
 * Addresses live in the kernel half of the address space (FG_VA_BASE): unique, aligned, and never
 * host memory a caller could read by mistake: dereferencing one faults at once. Each device
 * ordinal has its own 1 TiB window; a first-fit search over the sorted table reuses freed ranges.
 * Sizes are charged in 2 MiB granules, the page size a real GPU hands out large allocations in.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define FG_VA_BASE 0xffff800000000000ULL

/* The legacy entry points' 32-bit pointers: one window below 4 GiB shared by every device. */
#define FG_VA_LOW_BASE 0x10000000ULL
#define FG_VA_LOW_END 0xF0000000ULL

#define FREEABLE ((1u << FG_K_MEM) | (1u << FG_K_MANAGED) | (1u << FG_K_PITCH) | (1u << FG_K_ASYNC))

typedef struct alloc {
    CUdeviceptr ptr;
    uint64_t len;      /* the address range it takes: its size in whole granules */
    uint64_t size;     /* what was asked for (cuMemGetAddressRange) */
    uint64_t charged;  /* bytes in this process's slot (0 once shared, or for an opened IPC handle) */
    uint64_t share_id; /* the shared allocation it is (exported or opened), 0: none */
    int dev;
    int kind;
    const fg_ctx *ctx; /* freed with its context */
    struct fg_pool *pool; /* stream-ordered: the bytes belong to this pool, not to the table */
} alloc;

/* Guarded by fg_cu.mu; sorted by ptr. */
static alloc *tab;
static size_t ntab, captab;

static size_t lower_bound(CUdeviceptr p) {
    size_t lo = 0, hi = ntab;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tab[mid].ptr < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static CUdeviceptr find_gap(int dev, uint64_t size, int low) {
    uint64_t base = low ? FG_VA_LOW_BASE : FG_VA_BASE + (uint64_t)dev * FG_VA_WINDOW;
    uint64_t end = low ? FG_VA_LOW_END : base + FG_VA_WINDOW, cur = base;
    for (size_t i = lower_bound(base); i < ntab && tab[i].ptr < end; i++) {
        if (tab[i].ptr - cur >= size)
            break;
        cur = tab[i].ptr + tab[i].len;
    }
    return end - cur >= size ? cur : 0;
}

/* A pool's allocation goes back to its pool (which keeps it reserved until a synchronisation
 * trims it); a shared one lets go of its shared entry (its bytes go with the last holder); any
 * other gives its bytes back to the device. State lock held. */
static void uncharge_locked(const alloc *a) {
    if (a->share_id)
        fg_state_share_drop(&fg_cu.st, a->share_id);
    if (a->pool)
        fg_pool_give(a->pool, a->charged);
    else if (a->charged)
        fg_state_release(&fg_cu.st, fg_cu.dev[a->dev].unit, a->charged, 0);
}

/* The one path every device allocation takes: fault check, address, shared charge (or the
 * pool's), table. */
static CUresult do_alloc_in(CUdeviceptr *out, size_t size, int kind, int dev, int ctx_bound, struct fg_pool *pool,
                            int low) {
    fg_ctx *c;
    CUresult r = fg_cu_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (dev < 0)
        dev = c->dev;
    if (fg_cu_lost(dev))
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    fg_alloc_delay();
    unsigned long nth = __atomic_add_fetch(&fg_cu.alloc_calls, 1, __ATOMIC_RELAXED);
    if (fg_cu.cfg.faults.fail_alloc && nth == fg_cu.cfg.faults.fail_alloc)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (size > FG_VA_WINDOW)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t charged = (size + FG_GRANULE - 1) / FG_GRANULE * FG_GRANULE;
    pthread_mutex_lock(&fg_cu.mu);
    CUdeviceptr p = find_gap(dev, charged, low);
    int rc = -1;
    if (p && ntab == captab) {
        size_t ncap = captab ? captab * 2 : 64;
        alloc *t = realloc(tab, ncap * sizeof *t);
        if (t)
            tab = t, captab = ncap;
    }
    if (p && ntab < captab && pool) {
        rc = fg_pool_take(pool, charged) == CUDA_SUCCESS ? 0 : -1;
    } else if (p && ntab < captab && fg_state_lock(&fg_cu.st) == 0) {
        rc = fg_state_charge(&fg_cu.st, fg_cu.dev[dev].unit, charged, fg_cu.dev[dev].total, 0);
        fg_state_unlock(&fg_cu.st);
    }
    if (rc == 0) {
        size_t i = lower_bound(p);
        memmove(&tab[i + 1], &tab[i], (ntab - i) * sizeof *tab);
        tab[i] = (alloc){p, charged, size, charged, 0, dev, kind, ctx_bound ? c : NULL, pool};
        ntab++;
        *out = p;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    if (rc == -2)
        fg_log("more than %d processes use the device state %s", FG_MAX_SLOTS, fg_cu.st.path);
    return rc == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult do_alloc(CUdeviceptr *out, size_t size, int kind, int dev, int ctx_bound) {
    return do_alloc_in(out, size, kind, dev, ctx_bound, NULL, 0);
}

CUresult fg_mem_alloc_pool(CUdeviceptr *out, size_t size, struct fg_pool *p) {
    return do_alloc_in(out, size, FG_K_ASYNC, fg_pool_dev(p), 1, p, 0);
}

CUresult fg_mem_alloc_kind(CUdeviceptr *out, size_t size, int kind, int low) {
    return do_alloc_in(out, size, kind, -1, 1, NULL, low);
}

CUresult fg_mem_free(CUdeviceptr p, unsigned kinds) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&fg_cu.mu);
    size_t i = lower_bound(p);
    if (p == 0 || i == ntab || tab[i].ptr != p || !(kinds & (1u << tab[i].kind))) {
        /* A graph's allocation freed outside the graph goes back to the graph memory pool. */
        r = (kinds & FREEABLE) && p && fg_graph_free_ptr(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    } else if (fg_state_lock(&fg_cu.st) == 0) {
        uncharge_locked(&tab[i]);
        fg_state_unlock(&fg_cu.st);
        memmove(&tab[i], &tab[i + 1], (ntab - i - 1) * sizeof *tab);
        ntab--;
    } else {
        r = CUDA_ERROR_UNKNOWN;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

/* Frees every allocation made in ctx (context destroyed or reset). */
static void mem_ctx_gone(fg_ctx *ctx) {
    size_t k = 0;
    for (size_t i = 0; i < ntab; i++) {
        if (tab[i].ctx != ctx) {
            tab[k++] = tab[i];
        } else if (tab[i].pool && !tab[i].share_id) {
            fg_pool_give(tab[i].pool, tab[i].charged);
        } else if (fg_state_lock(&fg_cu.st) == 0) {
            uncharge_locked(&tab[i]);
            fg_state_unlock(&fg_cu.st);
        }
    }
    ntab = k;
}

/* Forked child: the parent's allocations stay the parent's. */
static void mem_forget_all(void) {
    free(tab);
    tab = NULL, ntab = captab = 0;
}
static const fg_cu_observer mem_observer = {.ctx_gone = mem_ctx_gone, .forget_all = mem_forget_all};
static void __attribute__((constructor)) mem_register(void) { fg_cu_observe(&mem_observer, FG_CU_STAGE_ALLOCATIONS); }

static CUresult precheck(const void *out, size_t size) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    return !out || size == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

FG_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    CUresult r = precheck(dptr, bytesize);
    return r ? r : do_alloc(dptr, bytesize, FG_K_MEM, -1, 1);
}

FG_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    CUresult r = precheck(dptr, bytesize);
    if (r == CUDA_SUCCESS && flags != CU_MEM_ATTACH_GLOBAL && flags != 0x2 /* CU_MEM_ATTACH_HOST */)
        r = CUDA_ERROR_INVALID_VALUE;
    /* Counted as device memory from the start: the fake has no page migration. */
    return r ? r : do_alloc(dptr, bytesize, FG_K_MANAGED, -1, 1);
}

FG_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                      unsigned int ElementSizeBytes) {
    CUresult r = precheck(dptr, WidthInBytes * Height);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pPitch || (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (WidthInBytes + 511) / 512 * 512; /* the texture pitch alignment of real GPUs */
    if (Height > FG_VA_WINDOW / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = do_alloc(dptr, pitch * Height, FG_K_PITCH, -1, 1);
    if (r == CUDA_SUCCESS)
        *pPitch = pitch;
    return r;
}

/* The allocation that contains p (fg_cu.mu held): its index, or -1. */
static ssize_t containing(CUdeviceptr p) {
    size_t i = lower_bound(p + 1);
    if (i == 0)
        return -1;
    const alloc *a = &tab[i - 1];
    return p >= a->ptr && p - a->ptr < a->len ? (ssize_t)(i - 1) : -1;
}

CUresult fg_mem_range(CUdeviceptr p, CUdeviceptr *base, uint64_t *size) {
    pthread_mutex_lock(&fg_cu.mu);
    ssize_t i = containing(p);
    if (i >= 0)
        *base = tab[i].ptr, *size = tab[i].size;
    pthread_mutex_unlock(&fg_cu.mu);
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult fg_mem_ipc_export(CUdeviceptr p, fg_ipc_ref *ref) {
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    ssize_t i = containing(p);
    alloc *a = i >= 0 ? &tab[i] : NULL;
    if (a && a->ptr == p && (a->kind == FG_K_MEM || a->kind == FG_K_PITCH) && fg_state_lock(&fg_cu.st) == 0) {
        if (!a->share_id) {
            int j = fg_state_share(&fg_cu.st, fg_cu.dev[a->dev].unit, a->charged, FG_SHARE_IPC);
            if (j >= 0)
                a->share_id = fg_cu.st.sh->share[j].id, a->charged = 0;
        }
        r = CUDA_ERROR_OUT_OF_MEMORY; /* the shared table is full */
        for (int j = 0; a->share_id && j < FG_MAX_SHARED; j++)
            if (fg_cu.st.sh->share[j].id == a->share_id) {
                *ref = (fg_ipc_ref){a->share_id, fg_cu.st.sh->share[j].nonce, a->size, fg_cu.st.sh->share[j].unit};
                r = CUDA_SUCCESS;
            }
        fg_state_unlock(&fg_cu.st);
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

CUresult fg_mem_ipc_open(CUdeviceptr *out, const fg_ipc_ref *ref) {
    fg_ctx *c;
    CUresult r = fg_cu_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    int dev = -1;
    for (int d = 0; d < fg_cu.ndev && dev < 0; d++)
        if (fg_cu.dev[d].unit == ref->unit)
            dev = d;
    if (dev < 0)
        return CUDA_ERROR_INVALID_DEVICE; /* its device is not visible to this process */
    uint64_t len = fg_granules(ref->size);
    pthread_mutex_lock(&fg_cu.mu);
    CUdeviceptr p = find_gap(dev, len, 0);
    if (p && ntab == captab) {
        size_t ncap = captab ? captab * 2 : 64;
        alloc *t = realloc(tab, ncap * sizeof *t);
        if (t)
            tab = t, captab = ncap;
    }
    r = CUDA_ERROR_OUT_OF_MEMORY;
    if (p && ntab < captab && fg_state_lock(&fg_cu.st) == 0) {
        int own = fg_state_own_slot(&fg_cu.st), held = -1;
        for (int j = 0; own >= 0 && j < FG_MAX_SHARED; j++) {
            const fg_shared_alloc *a = &fg_cu.st.sh->share[j];
            if (a->id == ref->id && a->nonce == ref->nonce)
                held = (a->holders[own / 64] >> (own % 64)) & 1;
        }
        if (held == 1)
            r = CUDA_ERROR_INVALID_CONTEXT; /* a process cannot open its own handle */
        else if (held < 0 || fg_state_share_hold(&fg_cu.st, ref->id, ref->nonce) < 0)
            r = CUDA_ERROR_INVALID_HANDLE; /* freed by its last holder, or never exported */
        else
            r = CUDA_SUCCESS;
        fg_state_unlock(&fg_cu.st);
    }
    if (r == CUDA_SUCCESS) {
        size_t i = lower_bound(p);
        memmove(&tab[i + 1], &tab[i], (ntab - i) * sizeof *tab);
        tab[i] = (alloc){p, len, ref->size, 0, ref->id, dev, FG_K_IPC, c, NULL};
        ntab++;
        *out = p;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

/* Stream-ordered allocation is immediate (the fake has no stream ordering), from the device's
 * current pool; on a capturing stream it becomes a graph allocation node instead. */
FG_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    fg_ctx *c;
    CUresult r = precheck(dptr, bytesize);
    if (r != CUDA_SUCCESS || (r = fg_cu_need_ctx(&c)) != CUDA_SUCCESS)
        return r;
    if (fg_capture_alloc(hStream, bytesize, dptr, &r))
        return r;
    pthread_mutex_lock(&fg_cu.mu);
    struct fg_pool *p = fg_pool_current(c->dev);
    pthread_mutex_unlock(&fg_cu.mu);
    return p ? fg_mem_alloc_pool(dptr, bytesize, p) : CUDA_ERROR_OUT_OF_MEMORY;
}

FG_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    return cuMemAllocAsync(dptr, bytesize, hStream);
}

FG_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
    fg_ctx *c;
    CUresult r = precheck(dptr, bytesize);
    if (r != CUDA_SUCCESS || (r = fg_cu_need_ctx(&c)) != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&fg_cu.mu);
    int ok = fg_pool_valid((struct fg_pool *)pool);
    pthread_mutex_unlock(&fg_cu.mu);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    if (fg_capture_alloc(hStream, bytesize, dptr, &r))
        return r;
    return fg_mem_alloc_pool(dptr, bytesize, (struct fg_pool *)pool);
}

FG_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                CUstream hStream) {
    return cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
}

FG_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) { return fg_mem_free(dptr, FREEABLE); }

FG_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    CUresult r;
    if (fg_cu_ready() == CUDA_SUCCESS && fg_capture_free(hStream, dptr, &r))
        return r;
    return fg_mem_free(dptr, FREEABLE);
}

FG_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) { return cuMemFreeAsync(dptr, hStream); }

FG_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
    fg_ctx *c;
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!free || !total)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = fg_cu_need_ctx(&c)) != CUDA_SUCCESS)
        return r;
    if (fg_state_lock(&fg_cu.st) != 0) /* also reclaims dead processes' memory */
        return CUDA_ERROR_UNKNOWN;
    uint64_t used = fg_state_unit_used(&fg_cu.st, fg_cu.dev[c->dev].unit);
    fg_state_unlock(&fg_cu.st);
    uint64_t t = fg_cu.dev[c->dev].total;
    *total = t;
    *free = used < t ? t - used : 0;
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuMemGetInfo(unsigned int *free, unsigned int *total) {
    size_t f, t;
    if (!free || !total)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuMemGetInfo_v2(&f, &t);
    if (r == CUDA_SUCCESS) {
        *free = f > 0xffffffffu ? 0xffffffffu : (unsigned)f;
        *total = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
    }
    return r;
}
