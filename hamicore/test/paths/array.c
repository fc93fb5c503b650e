/* CUDA arrays, 3D and mipmapped.
 *   a 1024 x 1024 x 400 float array (1600 MiB), a 1024 x 1024 x 256 float mipmapped array with
 *   11 levels (about 1170 MiB), then a 8192 x 16384 float 2D array (512 MiB)
 * native:  all granted.
 * limited: the 2D array is refused (1600 + 1170 + 512 > 3000); usage 0 after the destroys. */
#include "path.h"

int main(void)
{
    path_begin();
    path_ctx();
    unsigned long long start = free_mib();
    CUarray a3, a2;
    CUmipmappedArray mm;
    CUDA_ARRAY3D_DESCRIPTOR d3 = {1024, 1024, 400, CU_AD_FORMAT_FLOAT, 1, 0};
    CU(cuArray3DCreate(&a3, &d3));
    CUDA_ARRAY3D_DESCRIPTOR dm = {1024, 1024, 256, CU_AD_FORMAT_FLOAT, 1, 0};
    CU(cuMipmappedArrayCreate(&mm, &dm, 11));
    unsigned long long f = free_mib();
    if (path_limited)
        EXPECT(f < path_limit_mib - 1600 - 1100, "free %llu MiB: both arrays count", f);
    else
        EXPECT(start - f >= 2700, "free dropped by %llu MiB", start - f);
    CUDA_ARRAY_DESCRIPTOR d2 = {8192, 16384, CU_AD_FORMAT_FLOAT, 1};
    CUresult r = cuArrayCreate(&a2, &d2);
    if (path_limited) {
        EXPECT(r == CUDA_ERROR_OUT_OF_MEMORY, "512 MiB 2D array refused at the limit (%d)", r);
    } else {
        EXPECT(r == CUDA_SUCCESS, "512 MiB 2D array granted (%d)", r);
        if (r == CUDA_SUCCESS)
            CU(cuArrayDestroy(a2));
    }
    CU(cuMipmappedArrayDestroy(mm));
    CU(cuArrayDestroy(a3));
    expect_all_released(start);
    return path_end("arrays");
}
