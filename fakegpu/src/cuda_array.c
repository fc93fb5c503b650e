/*
 * CUDA arrays and mipmapped arrays: device allocations of the current context's device, charged
 * width x height x depth x channels x element size (a mipmapped array every level: max(1, dim >> l)
 * in each dimension); their handles are the allocation's fake address (cuda_mem.c), never
 * dereferenced.
 */
#include "cuda_internal.h"

static size_t element_size(CUarray_format f) {
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    }
    return 0;
}

CUresult fg_array_alloc(CUarray *pHandle, size_t w, size_t h, size_t d, CUarray_format f, unsigned ch, int low) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    size_t es = element_size(f);
    if (!pHandle || !w || !es || (ch != 1 && ch != 2 && ch != 4))
        return CUDA_ERROR_INVALID_VALUE;
    h = h ? h : 1, d = d ? d : 1;
    if (w > 1u << 20 || h > 1u << 20 || d > 1u << 20)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p;
    size_t row = w * es * ch;
    if (h * d > FG_VA_WINDOW / row)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = fg_mem_alloc_kind(&p, row * h * d, FG_K_ARRAY, low);
    if (r == CUDA_SUCCESS)
        *pHandle = (CUarray)(uintptr_t)p; /* an opaque handle: never dereferenced */
    return r;
}

FG_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray) {
    if (!pAllocateArray)
        return fg_cu_ready() ? fg_cu_ready() : CUDA_ERROR_INVALID_VALUE;
    const CUDA_ARRAY_DESCRIPTOR *a = pAllocateArray;
    return fg_array_alloc(pHandle, a->Width, a->Height, 1, a->Format, a->NumChannels, 0);
}

FG_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray) {
    if (!pAllocateArray)
        return fg_cu_ready() ? fg_cu_ready() : CUDA_ERROR_INVALID_VALUE;
    const CUDA_ARRAY3D_DESCRIPTOR *a = pAllocateArray;
    return fg_array_alloc(pHandle, a->Width, a->Height, a->Depth, a->Format, a->NumChannels, 0);
}

/* A mipmapped array holds every level: level l is max(1, dim >> l) in each dimension. */
FG_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                          unsigned int numMipmapLevels) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pHandle || !desc || !numMipmapLevels || numMipmapLevels > 32)
        return CUDA_ERROR_INVALID_VALUE;
    size_t es = element_size(desc->Format), ch = desc->NumChannels;
    size_t w = desc->Width, h = desc->Height ? desc->Height : 1, d = desc->Depth ? desc->Depth : 1;
    if (!w || !es || (ch != 1 && ch != 2 && ch != 4) || w > 1u << 20 || h > 1u << 20 || d > 1u << 20)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t total = 0;
    for (unsigned l = 0; l < numMipmapLevels; l++) {
        uint64_t lw = w >> l ? w >> l : 1, lh = h >> l ? h >> l : 1, ld = d >> l ? d >> l : 1;
        total += lw * lh * ld * es * ch;
    }
    if (total > FG_VA_WINDOW)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUdeviceptr p;
    r = fg_mem_alloc_kind(&p, total, FG_K_MIPMAP, 0);
    if (r == CUDA_SUCCESS)
        *pHandle = (CUmipmappedArray)(uintptr_t)p;
    return r;
}

FG_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    return h ? fg_mem_free((CUdeviceptr)(uintptr_t)h, 1u << FG_K_MIPMAP) : CUDA_ERROR_INVALID_HANDLE;
}

FG_EXPORT CUresult cuArrayDestroy(CUarray hArray) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    return hArray ? fg_mem_free((CUdeviceptr)(uintptr_t)hArray, 1u << FG_K_ARRAY) : CUDA_ERROR_INVALID_HANDLE;
}
