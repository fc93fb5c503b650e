/* cuGetProcAddress: CUDA >= 11.3 runtimes fetch every driver entry point through it (the CUDA 13
 * runtime asks for cuLaunchKernel at versions 4000 and 7000, cuLaunchKernelEx at 11060), so only
 * interposing exported symbols would be bypassed. We let the driver pick the entry point for the
 * requested name/version/flags, then, if it is one of the real entries of our table, hand back
 * our wrapper for that exact versioned symbol (_v2, _v3, _ptsz ... come out right for free).
 * A pointer that is none of them (a driver handing out an internal alias) is matched by the
 * requested name, version and flags instead (hooktable.h). */
#include "init.h"
#include "symbols.h"

LB_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    __typeof__(&cuGetProcAddress) real = LB_REAL(cuGetProcAddress);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn && *pfn && !(lb_guard && lb_from_driver(__builtin_return_address(0))))
        *pfn = lb_sym_wrap_proc(symbol, cudaVersion, flags, *pfn);
    return r;
}

LB_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus)
{
    __typeof__(&cuGetProcAddress_v2) real = LB_REAL(cuGetProcAddress_v2);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn && *pfn && !(lb_guard && lb_from_driver(__builtin_return_address(0))))
        *pfn = lb_sym_wrap_proc(symbol, cudaVersion, flags, *pfn);
    return r;
}

LB_EXPORT CUresult cuInit(unsigned int flags)
{
    lb_active(); /* attach the region before the first allocation can race for it */
    __typeof__(&cuInit) real = LB_REAL(cuInit);
    return real ? real(flags) : CUDA_ERROR_NOT_FOUND;
}
