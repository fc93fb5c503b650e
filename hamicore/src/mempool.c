/* Stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync): charged by their pool's
 * reserve (reserve.c), refused before the driver call when the growth they may cause does not fit.
 * A pool that is destroyed gives back what it was charged and its place in the pool table. */
#include "charge.h"
#include "log.h"

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
        lb_log_reentered(api);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!e)
        return call(dptr, bytes, pool, s, real);
    int cur = lb_cur_mem(&dev, &ord);
    if (cur == LB_CUR_UNKNOWN) {
        lb_log_unplaced(api);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (cur != 0 || lb_stream_capturing(s))
        return call(dptr, bytes, pool, s, real);
    CUmemoryPool from = pool;
    __typeof__(&cuDeviceGetMemPool) getpool = LB_REAL(cuDeviceGetMemPool);
    if (!from && (!getpool || getpool(&from, ord) != CUDA_SUCCESS))
        from = NULL;
    /* The memory is charged by its pool's reserve, read after the call: a pool that cannot be
     * named or followed (the pool table is full) would leave it uncharged, so it is refused. */
    if (!from || !lb_pool_follow(from, dev)) {
        LB_WARN("%s: refused: its memory pool cannot be %s", api, from ? "followed (more than 256 live pools)" : "told");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct charge c;
    uint64_t growth = lb_pool_growth(from, bytes);
    if (charge_dev(&c, api, dev, growth) != CH_HELD)
        return CUDA_ERROR_OUT_OF_MEMORY;
    lb_guard_enter();
    CUresult r = call(dptr, bytes, pool, s, real);
    lb_guard_leave();
    lb_region_release(dev, growth); /* the settle below charges what the pool really took */
    lb_pool_settle(from, dev);
    if (r == CUDA_SUCCESS)
        forget_stale(&g_ptrs, *dptr);
    if (r == CUDA_SUCCESS && table_take(&g_ptrs)) /* no place: its free is just not seen (the reserve is) */
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

LB_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    REAL_OR_FAIL(cuMemPoolDestroy);
    if (enforcing(__builtin_return_address(0)) <= 0)
        return real(pool);
    lb_guard_enter();
    CUresult r = real(pool);
    lb_guard_leave();
    if (r == CUDA_SUCCESS)
        lb_pool_forget(pool);
    return r;
}
