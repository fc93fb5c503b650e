/*
 * The legacy (CUDA < 3.2) allocation entry points, whose device pointers, pitches and array
 * dimensions are 32-bit: cuMemAlloc, cuMemAllocPitch, cuMemFree, cuArrayCreate, cuArray3DCreate.
 * A program built against an old toolkit — or one that asks cuGetProcAddress for them at an old
 * version — still reaches them, and they allocate device memory like their _v2 successors. Their
 * pointers come from a window below 4 GiB shared by every device (cuda_mem.c).
 */
#include "cuda_internal.h"

static CUresult low_alloc(CUdeviceptr_v1 *dptr, uint64_t bytes, int kind) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p;
    if ((r = fg_mem_alloc_kind(&p, bytes, kind, 1)) == CUDA_SUCCESS)
        *dptr = (CUdeviceptr_v1)p;
    return r;
}

FG_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize) {
    return low_alloc(dptr, bytesize, FG_K_MEM);
}

FG_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                                   unsigned int Height, unsigned int ElementSizeBytes) {
    if (!pPitch || !WidthInBytes || !Height || (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return fg_cu_ready() ? fg_cu_ready() : CUDA_ERROR_INVALID_VALUE;
    uint64_t pitch = ((uint64_t)WidthInBytes + 511) / 512 * 512; /* as cuMemAllocPitch_v2 */
    if (pitch > 0xffffffffu)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = low_alloc(dptr, pitch * Height, FG_K_PITCH);
    if (r == CUDA_SUCCESS)
        *pPitch = (unsigned int)pitch;
    return r;
}

FG_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    return fg_mem_free(dptr, (1u << FG_K_MEM) | (1u << FG_K_PITCH));
}

FG_EXPORT CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *d) {
    if (!d)
        return fg_cu_ready() ? fg_cu_ready() : CUDA_ERROR_INVALID_VALUE;
    return fg_array_alloc(pHandle, d->Width, d->Height, 1, d->Format, d->NumChannels, 1);
}

FG_EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d) {
    if (!d)
        return fg_cu_ready() ? fg_cu_ready() : CUDA_ERROR_INVALID_VALUE;
    return fg_array_alloc(pHandle, d->Width, d->Height, d->Depth, d->Format, d->NumChannels, 1);
}
