/* Context destroy and primary-context reset free what the context owned (the driver does it).
 * native:  every 2000 MiB allocation after a destroy/reset is granted; so is a second 2000 MiB
 *          in one context (the GPU has room).
 * limited: the same grants (the destroyed context's memory is released from the account); the
 *          second 2000 MiB in one live context is refused; usage back to 0 at the end. */
#include "path.h"

#define BIG (2000 * MIB)

int main(void)
{
    path_begin();
    CUdevice d = 0;
    CUcontext c = NULL, prim;
    CUdeviceptr p, q;
    if (cuInit(0) != CUDA_SUCCESS || cuCtxCreate(&c, 0, d) != CUDA_SUCCESS)
        return printf("FAIL no CUDA device\n"), 1;
    unsigned long long start = free_mib(); /* in a created context: the end is in one too */
    CU(cuMemAlloc(&p, BIG));
    CUresult r = cuMemAlloc(&q, BIG);
    if (path_limited)
        EXPECT(r == CUDA_ERROR_OUT_OF_MEMORY, "second 2000 MiB in one context refused (%d)", r);
    else
        EXPECT(r == CUDA_SUCCESS, "second 2000 MiB in one context granted (%d)", r);
    CU(cuCtxDestroy(c)); /* without freeing: the driver frees both */
    CU(cuCtxCreate(&c, 0, d));
    EXPECT(cuMemAlloc(&p, BIG) == CUDA_SUCCESS, "2000 MiB after cuCtxDestroy granted");
    CU(cuCtxDestroy(c));

    CU(cuDevicePrimaryCtxRetain(&prim, d));
    CU(cuCtxSetCurrent(prim));
    CU(cuMemAlloc(&p, BIG));
    CU(cuDevicePrimaryCtxReset(d)); /* cudaDeviceReset */
    CU(cuDevicePrimaryCtxRetain(&prim, d));
    CU(cuCtxSetCurrent(prim));
    EXPECT(cuMemAlloc(&p, BIG) == CUDA_SUCCESS, "2000 MiB after cuDevicePrimaryCtxReset granted");
    /* Release every reference: the primary context goes, and its memory with it. */
    unsigned flags;
    int active = 1, n = 0;
    while (active && n++ < 8 && cuDevicePrimaryCtxRelease(d) == CUDA_SUCCESS)
        CU(cuDevicePrimaryCtxGetState(d, &flags, &active));
    EXPECT(!active, "primary context inactive after %d releases", n);
    CU(cuCtxCreate(&c, 0, d));
    EXPECT(cuMemAlloc(&p, BIG) == CUDA_SUCCESS && cuMemAlloc(&q, 900 * MIB) == CUDA_SUCCESS,
           "2000 + 900 MiB after the last cuDevicePrimaryCtxRelease granted");
    CU(cuMemFree(p));
    CU(cuMemFree(q));
    expect_all_released(start);
    CU(cuCtxDestroy(c));
    return path_end("context-destroy-reset");
}
