/* VMM, released early: create → reserve → map → set access → release at once (the documented
 * pattern; the physical memory lives until the last unmap), 16 x 512 MiB.
 * native:  all 16 granted; free memory drops by 8192 MiB and comes back only at the unmaps.
 * limited: the 6th is refused (6 x 512 > 3000), free reads limit - 5 x 512 until the unmaps,
 *          then the limit again. */
#include "path.h"

#define N 16
#define CHUNK (512 * MIB)

int main(void)
{
    path_begin();
    path_ctx();
    unsigned long long start = free_mib();
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT(gran && CHUNK % gran == 0, "granularity %zu divides 512 MiB", gran);
    CUdeviceptr va = 0;
    CU(cuMemAddressReserve(&va, N * CHUNK, 0, 0, 0));
    int granted = 0;
    CUresult refused = CUDA_SUCCESS;
    for (int i = 0; i < N; i++) {
        CUmemGenericAllocationHandle h;
        CUresult r = cuMemCreate(&h, CHUNK, &prop, 0);
        if (r != CUDA_SUCCESS) {
            refused = r;
            break;
        }
        CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        if (cuMemMap(va + i * CHUNK, CHUNK, 0, h, 0) != CUDA_SUCCESS ||
            cuMemSetAccess(va + i * CHUNK, CHUNK, &acc, 1) != CUDA_SUCCESS) {
            printf("FAIL map/set access of chunk %d\n", i);
            path_failed = 1;
        }
        CU(cuMemRelease(h)); /* right away: the mapping keeps the memory */
        granted++;
    }
    unsigned long long mapped = free_mib();
    if (path_limited) {
        int want = (int)(path_limit_mib * MIB / CHUNK);
        EXPECT(granted == want && refused == CUDA_ERROR_OUT_OF_MEMORY, "granted %d of %d (want %d, then OUT_OF_MEMORY)",
               granted, N, want);
        EXPECT(mapped == path_limit_mib - granted * (CHUNK / MIB), "after release, mapped memory still counts: free %llu MiB",
               mapped);
    } else {
        EXPECT(granted == N, "granted %d of %d", granted, N);
        EXPECT(near(start - mapped, N * CHUNK / MIB, NATIVE_TOL), "after release, free dropped by %llu MiB (8192 mapped)",
               start - mapped);
    }
    CU(cuMemUnmap(va, granted * CHUNK)); /* the last mapping goes: now the memory is freed */
    CU(cuMemAddressFree(va, N * CHUNK));
    expect_all_released(start);
    return path_end("vmm-early-release");
}
