/* Stream-ordered pools hold freed memory reserved up to their release threshold.
 * The default pool gets threshold = max: 2000 MiB allocated, freed and synchronised stays reserved.
 * native:  an explicit pool's 1500 MiB is granted; free memory stays down by the 2000 reserved
 *          until cuMemPoolTrimTo; a 2000 MiB reuse of the default pool costs nothing new.
 * limited: the explicit pool's 1500 MiB is refused while the default pool holds 2000 reserved,
 *          granted after the trim; reuse granted; usage back to 0 at the end. */
#include "path.h"

int main(void)
{
    path_begin();
    path_ctx();
    unsigned long long start = free_mib();
    CUmemoryPool def, mine;
    CUstream s;
    CUdeviceptr p, q;
    cuuint64_t max = ~0ULL, v = 0;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuDeviceGetDefaultMemPool(&def, 0));
    CU(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &max));
    CUmemPoolProps props = {0};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CU(cuMemPoolCreate(&mine, &props));

    CU(cuMemAllocAsync(&p, 2000 * MIB, s));
    CU(cuMemFreeAsync(p, s));
    CU(cuStreamSynchronize(s));
    CU(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v));
    EXPECT(v >= 2000 * MIB, "default pool keeps %llu MiB reserved after free + sync", (unsigned long long)(v / MIB));
    CU(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
    EXPECT(v == 0, "default pool uses %llu bytes", (unsigned long long)v);
    unsigned long long f = free_mib();
    if (path_limited)
        EXPECT(near(f, path_limit_mib - 2000, NATIVE_TOL), "free %llu MiB: the reserve counts", f);
    else
        EXPECT(near(start - f, 2000, NATIVE_TOL), "free dropped by %llu MiB: the reserve is held", start - f);

    CUresult r = cuMemAllocFromPoolAsync(&q, 1500 * MIB, mine, s);
    if (path_limited) {
        EXPECT(r == CUDA_ERROR_OUT_OF_MEMORY, "1500 MiB from another pool refused while 2000 are reserved (%d)", r);
    } else {
        EXPECT(r == CUDA_SUCCESS, "1500 MiB from another pool granted (%d)", r);
        if (r == CUDA_SUCCESS)
            CU(cuMemFreeAsync(q, s));
    }
    CU(cuMemAllocAsync(&p, 2000 * MIB, s)); /* reuse of the reserve: no new memory */
    CU(cuMemFreeAsync(p, s));
    CU(cuStreamSynchronize(s));
    CU(cuMemPoolTrimTo(def, 0));
    CU(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v));
    EXPECT(v == 0, "after cuMemPoolTrimTo(0) the default pool reserves %llu bytes", (unsigned long long)v);
    r = cuMemAllocFromPoolAsync(&q, 1500 * MIB, mine, s);
    EXPECT(r == CUDA_SUCCESS, "1500 MiB from the other pool granted after the trim (%d)", r);
    r = cuMemAllocFromPoolAsync(&p, 2000 * MIB, mine, s);
    if (path_limited)
        EXPECT(r == CUDA_ERROR_OUT_OF_MEMORY, "another 2000 MiB refused at the limit (%d)", r);
    else
        EXPECT(r == CUDA_SUCCESS && cuMemFreeAsync(p, s) == CUDA_SUCCESS, "another 2000 MiB granted (%d)", r);
    CU(cuMemFreeAsync(q, s));
    CU(cuStreamSynchronize(s)); /* threshold 0: the explicit pool gives everything back */
    CU(cuMemPoolDestroy(mine));
    CU(cuStreamDestroy(s));
    expect_all_released(start);
    return path_end("pools");
}
