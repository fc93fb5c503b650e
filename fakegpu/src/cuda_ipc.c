/*
 * Legacy inter-process handles of cuMemAlloc'd memory, and cuMemGetAddressRange.
 *
 * cuIpcGetMemHandle makes the allocation a shared allocation of the device state (state.h): its
 * bytes leave the exporter's slot and are charged once, for as long as one holder lives — the
 * exporter until it frees the allocation, each importer until cuIpcCloseMemHandle or the
 * destruction of the context it opened the handle in. So the memory outlives an exporter that
 * frees it while another process still has it open, as the driver keeps it. The handle's 64 bytes
 * carry the entry's id and nonce, the size and the accounting unit; a handle that names no live
 * entry is CUDA_ERROR_INVALID_HANDLE, opening one's own CUDA_ERROR_INVALID_CONTEXT (as the driver).
 */
#include <string.h>

#include "cuda_internal.h"

#define IPC_MAGIC "FGIPC001"

typedef struct ipc_wire {
    char magic[8];
    uint64_t id, nonce, size;
    uint32_t unit, pad;
} ipc_wire;
_Static_assert(sizeof(ipc_wire) <= sizeof(CUipcMemHandle), "an IPC handle carries the reference");

FG_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pHandle || !dptr)
        return CUDA_ERROR_INVALID_VALUE;
    fg_ipc_ref ref;
    if ((r = fg_mem_ipc_export(dptr, &ref)) != CUDA_SUCCESS)
        return r;
    ipc_wire w = {.id = ref.id, .nonce = ref.nonce, .size = ref.size, .unit = ref.unit};
    memcpy(w.magic, IPC_MAGIC, sizeof w.magic);
    memset(pHandle, 0, sizeof *pHandle);
    memcpy(pHandle->reserved, &w, sizeof w);
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    ipc_wire w;
    memcpy(&w, handle.reserved, sizeof w);
    if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    if (memcmp(w.magic, IPC_MAGIC, sizeof w.magic) != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    fg_ipc_ref ref = {w.id, w.nonce, w.size, w.unit};
    return fg_mem_ipc_open(pdptr, &ref);
}

/* The CUDA 4.1-10.x spelling takes the same arguments. */
FG_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
    return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

FG_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    return dptr ? fg_mem_free(dptr, 1u << FG_K_IPC) : CUDA_ERROR_INVALID_VALUE;
}

FG_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    CUdeviceptr base;
    uint64_t size;
    if ((r = fg_mem_range(dptr, &base, &size)) != CUDA_SUCCESS)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = base;
    if (psize)
        *psize = (size_t)size;
    return CUDA_SUCCESS;
}
