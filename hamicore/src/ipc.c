/*
 * Memory another process of the pod allocated and this one opened through a legacy IPC handle
 * (cuIpcOpenMemHandle): the driver keeps it while the opener holds it, also after its exporter
 * freed it, so the opener is charged its whole allocation from the open to cuIpcCloseMemHandle
 * (allocs.def) or the destruction of the context it was opened in. Its size is only known once
 * it is open (cuMemGetAddressRange): charged then, and closed again at once if it does not fit.
 * While both hold it, the pod's counter has it twice: an over-count, never an under-count.
 */
#include "charge.h"
#include "devmap.h"
#include "log.h"

#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9

/* The GPU the opened memory is on: the pointer's device, else the current one's. */
static int ipc_phys(CUdeviceptr p, int cur)
{
    __typeof__(&cuPointerGetAttribute) attr = LB_REAL(cuPointerGetAttribute);
    int ord = -1;
    if (attr && attr(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) == CUDA_SUCCESS && ord >= 0) {
        int phys = lb_phys_index(ord);
        return phys < LB_REGION_MAX_DEVICES ? phys : -1;
    }
    return cur;
}

static CUresult close_again(CUdeviceptr p)
{
    __typeof__(&cuIpcCloseMemHandle) close = LB_REAL(cuIpcCloseMemHandle);
    if (close)
        (void)close(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

typedef CUresult (*open_fn)(CUdeviceptr *, CUipcMemHandle, unsigned int);

static CUresult ipc_open(CUdeviceptr *pdptr, CUipcMemHandle h, unsigned flags, open_fn real, const void *ra)
{
    int phys, ord;
    int e = enforcing(ra);
    if (e < 0) {
        lb_log_reentered("cuIpcOpenMemHandle");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    int cur = e ? lb_cur_mem(&phys, &ord) : LB_CUR_NONE;
    if (cur == LB_CUR_NONE || !pdptr)
        return real(pdptr, h, flags);
    if (cur == LB_CUR_UNKNOWN) {
        lb_log_unplaced("cuIpcOpenMemHandle");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!lb_region) {
        lb_log_no_region("cuIpcOpenMemHandle");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!table_take(&g_ptrs))
        return CUDA_ERROR_OUT_OF_MEMORY;
    lb_guard_enter();
    CUresult r = real(pdptr, h, flags);
    CUdeviceptr base = 0;
    size_t size = 0;
    __typeof__(&cuMemGetAddressRange_v2) range = LB_REAL(cuMemGetAddressRange_v2);
    int sized = r == CUDA_SUCCESS && range && range(&base, &size, *pdptr) == CUDA_SUCCESS && size;
    phys = r == CUDA_SUCCESS ? ipc_phys(*pdptr, phys) : phys;
    lb_guard_leave();
    if (r != CUDA_SUCCESS) {
        table_give(&g_ptrs);
        return r;
    }
    struct charge c;
    if (!sized || phys < 0 || charge_dev(&c, "cuIpcOpenMemHandle", phys, size) != CH_HELD) {
        if (!sized || phys < 0)
            LB_WARN("cuIpcOpenMemHandle: refused: the size or the GPU of the opened memory cannot be told");
        table_give(&g_ptrs);
        lb_guard_enter();
        r = close_again(*pdptr);
        lb_guard_leave();
        return r;
    }
    c.owner = lb_cur_ctx();
    return charge_settle(&c, &g_ptrs, CUDA_SUCCESS, *pdptr);
}

LB_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    REAL_OR_FAIL(cuIpcOpenMemHandle_v2);
    return ipc_open(pdptr, handle, Flags, real, __builtin_return_address(0));
}

LB_EXPORT CUresult lbw_cuIpcOpenMemHandle_v1(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    REAL_OR_FAIL(lbw_cuIpcOpenMemHandle_v1);
    return ipc_open(pdptr, handle, Flags, real, __builtin_return_address(0));
}
