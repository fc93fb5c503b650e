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

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "context.h"
#include "devmap.h"
#include "graph.h"
#include "init.h"
#include "log.h"
#include "region.h"
#include "reserve.h"
#include "symbols.h"

#define K_EMPTY 0u
#define K_TOMB 1u
#define K_BUSY 2u /* claimed, being written: not an entry yet */
#define K_BIAS 3u /* key = value + K_BIAS */

/* kind: how the entry's bytes are charged. */
enum { E_DIRECT = 0, E_POOL = 1 };

struct entry {
    _Atomic uint64_t key; /* value + K_BIAS; K_EMPTY / K_TOMB / K_BUSY */
    _Atomic uint64_t size;
    _Atomic uint64_t owner; /* E_DIRECT: the context it was allocated in; E_POOL: the pool */
    _Atomic int32_t dev;
    _Atomic int32_t kind;
};

/* Constant descriptors, so that the inlined lookups see the table size as a constant. */
struct table {
    struct entry *e;
    uint32_t bits;
    const char *what;
    _Atomic int *full_logged;
};

static struct entry g_ptr_e[1u << 16], g_array_e[1u << 12];
static _Atomic int g_full_logged[2];
static const struct table g_ptrs = {g_ptr_e, 16, "device pointers", &g_full_logged[0]};
static const struct table g_arrays = {g_array_e, 12, "CUDA arrays", &g_full_logged[1]};

static inline uint32_t slot_of(const struct table *t, uint64_t k)
{
    return (uint32_t)((k * 0x9E3779B97F4A7C15ULL) >> (64 - t->bits));
}

static void __attribute__((noinline, cold)) log_full(const struct table *t)
{
    if (!atomic_exchange(t->full_logged, 1))
        LB_ERROR("more than %u live %s: further ones stay charged until the process exits", 1u << t->bits, t->what);
}

/* An entry is published only complete: the slot is claimed (K_BUSY) before its fields are
 * written, and its key is stored last, with release order. A racing thread that sees K_BUSY
 * moves on; no one can overwrite a live entry's fields. */
static inline int track(const struct table *t, uint64_t value, uint64_t size, int dev, uint64_t owner, int kind)
{
    uint64_t k = value + K_BIAS;
    if (k < K_BIAS)
        return -1;
    uint32_t mask = (1u << t->bits) - 1, h = slot_of(t, k);
    for (uint32_t i = 0; i <= mask; i++) {
        struct entry *e = &t->e[(h + i) & mask];
        uint64_t cur = atomic_load_explicit(&e->key, memory_order_relaxed);
        if (cur != K_EMPTY && cur != K_TOMB)
            continue;
        if (!atomic_compare_exchange_strong_explicit(&e->key, &cur, K_BUSY, memory_order_acquire, memory_order_relaxed))
            continue;
        atomic_store_explicit(&e->size, size, memory_order_relaxed);
        atomic_store_explicit(&e->owner, owner, memory_order_relaxed);
        atomic_store_explicit(&e->dev, dev, memory_order_relaxed);
        atomic_store_explicit(&e->kind, kind, memory_order_relaxed);
        atomic_store_explicit(&e->key, k, memory_order_release);
        return 0;
    }
    log_full(t);
    return -1;
}

struct found {
    uint64_t size, owner;
    int dev, kind;
};

static inline int untrack(const struct table *t, uint64_t value, struct found *f)
{
    uint64_t k = value + K_BIAS;
    if (k < K_BIAS)
        return 0;
    uint32_t mask = (1u << t->bits) - 1, h = slot_of(t, k);
    for (uint32_t i = 0; i <= mask; i++) {
        struct entry *e = &t->e[(h + i) & mask];
        uint64_t cur = atomic_load_explicit(&e->key, memory_order_acquire);
        if (cur == K_EMPTY)
            return 0;
        if (cur != k)
            continue;
        f->size = atomic_load_explicit(&e->size, memory_order_relaxed);
        f->owner = atomic_load_explicit(&e->owner, memory_order_relaxed);
        f->dev = atomic_load_explicit(&e->dev, memory_order_relaxed);
        f->kind = atomic_load_explicit(&e->kind, memory_order_relaxed);
        if (atomic_compare_exchange_strong(&e->key, &cur, K_TOMB))
            return 1;
        return 0; /* freed concurrently by another thread: the other one accounts it */
    }
    return 0;
}

/* fork: the parent's allocations are not the child's to free. Clearing 1.7 MB of tables in every
 * child would cost each DataLoader-style worker that never touches CUDA; instead the child marks
 * them stale and the first of its own CUDA calls that reaches a table clears them, once. */
static _Atomic int g_stale;
static pthread_once_t g_clear_once = PTHREAD_ONCE_INIT;

static void clear_tables(void)
{
    memset(g_ptr_e, 0, sizeof g_ptr_e);
    memset(g_array_e, 0, sizeof g_array_e);
    atomic_store_explicit(&g_stale, 0, memory_order_release);
}

static void __attribute__((noinline, cold)) clear_stale(void) { pthread_once(&g_clear_once, clear_tables); }

static void fork_child(void)
{
    g_clear_once = (pthread_once_t)PTHREAD_ONCE_INIT;
    atomic_store_explicit(&g_stale, 1, memory_order_relaxed);
}

/* Registration only (no work): handlers must exist before the first fork, even one racing with
 * the library's initialisation. */
static void __attribute__((constructor(101))) memory_register_fork(void) { pthread_atfork(NULL, NULL, fork_child); }

/* Every entry the destroyed context owned: the driver freed it. */
void lb_memory_ctx_gone(uintptr_t ctx)
{
    const struct table *ts[2] = {&g_ptrs, &g_arrays};
    for (int t = 0; t < 2; t++) {
        uint32_t n = 1u << ts[t]->bits;
        for (uint32_t i = 0; i < n; i++) {
            struct entry *e = &ts[t]->e[i];
            uint64_t cur = atomic_load_explicit(&e->key, memory_order_acquire);
            if (cur < K_BIAS || atomic_load_explicit(&e->kind, memory_order_relaxed) != E_DIRECT ||
                atomic_load_explicit(&e->owner, memory_order_relaxed) != ctx)
                continue;
            uint64_t size = atomic_load_explicit(&e->size, memory_order_relaxed);
            int dev = atomic_load_explicit(&e->dev, memory_order_relaxed);
            if (atomic_compare_exchange_strong(&e->key, &cur, K_TOMB))
                lb_region_release(dev, size);
        }
    }
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
    uint64_t owner;
    int kind;
};

/* 1: enforce; 0: pass through (not active, or the driver calling its own entry point: ra, the
 * wrapper's return address, is in the driver); -1: a call made while this thread is inside one of
 * our hooks by anything but the driver — a signal handler — which the allocation paths refuse
 * (guard.h). */
static inline int enforcing(const void *ra)
{
    if (__builtin_expect(lb_guard, 0))
        return lb_guarded(ra);
    if (!lb_active())
        return 0;
    if (__builtin_expect(atomic_load_explicit(&g_stale, memory_order_acquire), 0))
        clear_stale();
    return 1;
}

static void __attribute__((noinline, cold)) log_reentered(const char *api)
{
    static _Atomic int logged;
    if (!atomic_exchange(&logged, 1))
        LB_WARN("%s: refused: called while this thread was inside another CUDA call of the library (a signal "
                "handler?), where it cannot be charged",
                api);
}

void lb_log_no_region(const char *api)
{
    static _Atomic int logged;
    if (!atomic_exchange(&logged, 1))
        LB_ERROR("%s: refused, as every allocation of this process: %s", api,
                 lb_region_refusal ? lb_region_refusal : "no usage region could be attached");
}

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
    c->owner = 0;
    c->kind = E_DIRECT;
    if (__builtin_expect(!lb_region, 0)) {
        lb_log_no_region(api);
        return CH_REFUSED;
    }
    if (lb_region_reserve(dev, bytes))
        return CH_HELD;
    /* Pools and graphs are charged by what the driver holds reserved, read at their own calls;
     * memory they gave back since (at a synchronisation) may be what is in the way. */
    if (lb_reserve_settle_all(dev) && lb_region_reserve(dev, bytes))
        return CH_HELD;
    log_refusal(api, dev, bytes);
    return CH_REFUSED;
}

static void __attribute__((noinline, cold)) log_unplaced(const char *api)
{
    int ord = lb_tls_dev.ord;
    LB_WARN("%s: CUDA device %d: refused: the library cannot tell which GPU it is, so its memory cannot be charged", api,
            ord);
}

/* Reserve on the GPU of the current context; no context: pass through (the driver refuses); a
 * device that cannot be placed on a GPU: refused. */
static inline int charge_cur(struct charge *c, const char *api, uint64_t bytes, const void *ra)
{
    int phys, ord;
    int e = enforcing(ra);
    if (__builtin_expect(e <= 0, 0)) {
        if (e == 0)
            return CH_PASS;
        log_reentered(api);
        return CH_REFUSED;
    }
    int cur = lb_cur_mem(&phys, &ord);
    if (__builtin_expect(cur != 0, 0)) {
        if (cur == LB_CUR_NONE)
            return CH_PASS;
        log_unplaced(api);
        return CH_REFUSED;
    }
    int st = charge_dev(c, api, phys, bytes);
    c->owner = lb_cur_ctx();
    return st;
}

static inline CUresult charge_settle(const struct charge *c, const struct table *t, CUresult r, uint64_t value)
{
    if (r != CUDA_SUCCESS)
        lb_region_release(c->dev, c->bytes);
    else
        (void)track(t, value, c->bytes, c->dev, c->owner, c->kind); /* full: stays charged (never under-counted) */
    return r;
}

/* Frees: 1 if the value was ours to account (then the driver is called guarded). */
static inline int uncharge_begin(struct charge *c, const struct table *t, uint64_t value, const void *ra)
{
    struct found f;
    /* A free in a signal handler inside a hook is accounted like any other (the tables are
     * lock-free): only the driver's own calls are passed through. */
    if (!enforcing(ra) || !untrack(t, value, &f))
        return 0;
    c->bytes = f.size, c->dev = f.dev, c->owner = f.owner, c->kind = f.kind;
    return 1;
}

static inline CUresult uncharge_settle(const struct charge *c, const struct table *t, uint64_t value, CUresult r)
{
    if (r != CUDA_SUCCESS)
        (void)track(t, value, c->bytes, c->dev, c->owner, c->kind); /* still allocated */
    else if (c->kind == E_POOL)
        lb_pool_settle((CUmemoryPool)(uintptr_t)c->owner, c->dev); /* back to its pool */
    else
        lb_region_release(c->dev, c->bytes);
    return r;
}

#define REAL_OR_FAIL(w)                                                                                             \
    __typeof__(&w) real = LB_REAL(w);                                                                               \
    if (!real)                                                                                                      \
        return CUDA_ERROR_NOT_FOUND

/* Stream-ordered allocations come out of a pool, which the driver grows and keeps reserved by
 * its release threshold: they are charged by the pool's reserve (reserve.c), refused before the
 * driver call when the growth they may cause does not fit. On a capturing stream the driver
 * records a graph node instead: charged when the graph launches. */
typedef CUresult (*pool_call)(CUdeviceptr *, size_t, CUmemoryPool, CUstream, void *);

static CUresult pool_alloc(const char *api, CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s,
                           pool_call call, void *real, const void *ra)
{
    int dev, ord;
    int e = enforcing(ra);
    if (e < 0) {
        log_reentered(api);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!e)
        return call(dptr, bytes, pool, s, real);
    int cur = lb_cur_mem(&dev, &ord);
    if (cur == LB_CUR_UNKNOWN) {
        log_unplaced(api);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (cur != 0 || lb_stream_capturing(s))
        return call(dptr, bytes, pool, s, real);
    CUmemoryPool from = pool;
    __typeof__(&cuDeviceGetMemPool) getpool = LB_REAL(cuDeviceGetMemPool);
    if (!from && (!getpool || getpool(&from, ord) != CUDA_SUCCESS))
        from = NULL;
    struct charge c;
    uint64_t growth = from ? lb_pool_growth(from, bytes) : bytes;
    if (charge_dev(&c, api, dev, growth) != CH_HELD)
        return CUDA_ERROR_OUT_OF_MEMORY;
    lb_guard_enter();
    CUresult r = call(dptr, bytes, pool, s, real);
    lb_guard_leave();
    lb_region_release(dev, growth); /* the settle below charges what the pool really took */
    if (from)
        lb_pool_settle(from, dev);
    if (r == CUDA_SUCCESS && from)
        (void)track(&g_ptrs, *dptr, 0, dev, (uintptr_t)from, E_POOL);
    return r;
}

static CUresult call_async(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s, void *f)
{
    (void)p; /* the device's current pool, as the driver picks it */
    return ((__typeof__(&cuMemAllocAsync))f)(d, n, s);
}

static CUresult call_from_pool(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s, void *f)
{
    return ((__typeof__(&cuMemAllocFromPoolAsync))f)(d, n, p, s);
}

LB_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    REAL_OR_FAIL(cuMemAllocAsync);
    return pool_alloc("cuMemAllocAsync", dptr, bytesize, NULL, hStream, call_async, (void *)real,
                      __builtin_return_address(0));
}

LB_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    REAL_OR_FAIL(cuMemAllocAsync_ptsz);
    return pool_alloc("cuMemAllocAsync", dptr, bytesize, NULL, hStream, call_async, (void *)real,
                      __builtin_return_address(0));
}

LB_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    REAL_OR_FAIL(cuMemAllocFromPoolAsync);
    if (!pool)
        return real(dptr, bytesize, pool, hStream);
    return pool_alloc("cuMemAllocFromPoolAsync", dptr, bytesize, pool, hStream, call_from_pool, (void *)real,
                      __builtin_return_address(0));
}

LB_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                CUstream hStream)
{
    REAL_OR_FAIL(cuMemAllocFromPoolAsync_ptsz);
    if (!pool)
        return real(dptr, bytesize, pool, hStream);
    return pool_alloc("cuMemAllocFromPoolAsync", dptr, bytesize, pool, hStream, call_from_pool, (void *)real,
                      __builtin_return_address(0));
}

LB_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    REAL_OR_FAIL(cuMemPoolTrimTo);
    int dev, ord;
    if (enforcing(__builtin_return_address(0)) <= 0 || lb_cur_mem(&dev, &ord) != 0)
        return real(pool, minBytesToKeep);
    lb_guard_enter();
    CUresult r = real(pool, minBytesToKeep);
    lb_guard_leave();
    lb_pool_settle(pool, dev);
    return r;
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
    int st = charge_cur(&c, "cuMemAllocPitch", est, __builtin_return_address(0));
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

/* The wrappers of one shape (allocs.def). */
#define LB_ALLOC(w, api, params, args, pass, bytes, out, table)                                                     \
    LB_EXPORT CUresult w params                                                                                     \
    {                                                                                                               \
        REAL_OR_FAIL(w);                                                                                            \
        if (pass)                                                                                                   \
            return real args;                                                                                       \
        struct charge c;                                                                                            \
        int st = charge_cur(&c, api, bytes, __builtin_return_address(0));                                          \
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
