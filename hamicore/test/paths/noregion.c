/* No usage region at all: the cache path cannot be opened and every mapping the library tries
 * fails (noregion_shim.so, preloaded after it, fails libvgpu.so's own mmap calls), so neither the
 * shared cache nor its private fallbacks exist. limited: every allocation is refused with
 * CUDA_ERROR_OUT_OF_MEMORY (one ERROR line), no crash. native: granted (no library). */
#include "path.h"

int main(void)
{
    path_begin();
    path_ctx();
    CUdeviceptr p = 0;
    CUresult r1 = cuMemAlloc(&p, MIB);
    CUresult r2 = path_limited ? cuMemAlloc(&p, MIB) : cuMemFree(p);
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemGenericAllocationHandle h;
    CUresult r3 = cuMemCreate(&h, 2 * MIB, &prop, 0);
    if (path_limited) {
        EXPECT(r1 == CUDA_ERROR_OUT_OF_MEMORY && r2 == CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc refused (%d, %d)", r1, r2);
        EXPECT(r3 == CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate refused (%d)", r3);
    } else {
        EXPECT(r1 == CUDA_SUCCESS && r2 == CUDA_SUCCESS && r3 == CUDA_SUCCESS && cuMemRelease(h) == CUDA_SUCCESS,
               "granted natively (%d, %d, %d)", r1, r2, r3);
    }
    return path_end("no-region");
}
