#ifndef LB_SYMBOLS_H
#define LB_SYMBOLS_H

#include <stdatomic.h>
#include <stddef.h>

#include "limitbed/cuda_abi.h"
#include "limitbed/nvml_abi.h"

#define LB_EXPORT __attribute__((visibility("default")))
/* Export a wrapper under a name the ABI headers turn into a macro (cuMemAlloc -> cuMemAlloc_v2). */
#define LB_SYMBOL(s) __asm__(#s)

enum lb_lib { LB_LIB_CUDA = 0, LB_LIB_NVML = 1 };

/* Entry points without a declaration in the ABI headers: same signatures as their base names. */
typedef unsigned int lb_deviceptr_v1;
LB_EXPORT CUresult lbw_cuMemAlloc_v1(lb_deviceptr_v1 *dptr, unsigned int bytesize) LB_SYMBOL(cuMemAlloc);
LB_EXPORT CUresult lbw_cuMemFree_v1(lb_deviceptr_v1 dptr) LB_SYMBOL(cuMemFree);
LB_EXPORT CUresult lbw_cuMemAllocPitch_v1(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                                          unsigned int Height, unsigned int ElementSizeBytes) LB_SYMBOL(cuMemAllocPitch);
LB_EXPORT CUresult lbw_cuArrayCreate_v1(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *d) LB_SYMBOL(cuArrayCreate);
LB_EXPORT CUresult lbw_cuArray3DCreate_v1(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d)
    LB_SYMBOL(cuArray3DCreate);
LB_EXPORT CUresult lbw_cuIpcOpenMemHandle_v1(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
    LB_SYMBOL(cuIpcOpenMemHandle);
CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr);
LB_EXPORT nvmlReturn_t lbw_nvmlInit_v1(void) LB_SYMBOL(nvmlInit);
LB_EXPORT CUresult lbw_cuCtxCreate_v1(CUcontext *pctx, unsigned int flags, CUdevice dev) LB_SYMBOL(cuCtxCreate);
LB_EXPORT CUresult lbw_cuCtxDestroy_v1(CUcontext ctx) LB_SYMBOL(cuCtxDestroy);
LB_EXPORT CUresult lbw_cuCtxPushCurrent_v1(CUcontext ctx) LB_SYMBOL(cuCtxPushCurrent);
LB_EXPORT CUresult lbw_cuCtxPopCurrent_v1(CUcontext *pctx) LB_SYMBOL(cuCtxPopCurrent);
LB_EXPORT CUresult lbw_cuDevicePrimaryCtxRelease_v1(CUdevice dev) LB_SYMBOL(cuDevicePrimaryCtxRelease);
LB_EXPORT CUresult lbw_cuDevicePrimaryCtxReset_v1(CUdevice dev) LB_SYMBOL(cuDevicePrimaryCtxReset);
/* Newer context constructors; their parameter structs are only passed through (opaque here). */
CUresult cuCtxCreate_v3(CUcontext *pctx, void *paramsArray, int numParams, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v4(CUcontext *pctx, void *ctxCreateParams, unsigned int flags, CUdevice dev);
__typeof__(cuMemAllocAsync) cuMemAllocAsync_ptsz;
__typeof__(cuMemAllocFromPoolAsync) cuMemAllocFromPoolAsync_ptsz;
__typeof__(cuMemFreeAsync) cuMemFreeAsync_ptsz;
__typeof__(cuLaunchKernel) cuLaunchKernel_ptsz;
__typeof__(cuGraphLaunch) cuGraphLaunch_ptsz;
__typeof__(cuGraphUpload) cuGraphUpload_ptsz;
__typeof__(cuStreamSynchronize) cuStreamSynchronize_ptsz;
CUresult cuEventSynchronize(CUevent hEvent);
LB_EXPORT CUresult lbw_cuGraphInstantiate_v1(CUgraphExec *px, CUgraph g, CUgraphNode *err, char *log, size_t n)
    LB_SYMBOL(cuGraphInstantiate);
CUresult cuGraphInstantiate_v2(CUgraphExec *px, CUgraph g, CUgraphNode *err, char *log, size_t n);
/* Its parameter struct is only passed through (opaque here). */
CUresult cuGraphInstantiateWithParams(CUgraphExec *px, CUgraph g, void *params);
__typeof__(cuLaunchKernelEx) cuLaunchKernelEx_ptsz;
__typeof__(cuLaunchCooperativeKernel) cuLaunchCooperativeKernel_ptsz;
/* Graph calls of the compute limiter (graphwork.c): the v1 kernel-node parameters are a prefix of
 * the v2 struct; child graphs are only walked. */
LB_EXPORT CUresult lbw_cuGraphExecUpdate_v1(CUgraphExec x, CUgraph g, CUgraphNode *err, CUgraphExecUpdateResult *res)
    LB_SYMBOL(cuGraphExecUpdate);
CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams);
CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph);

enum lb_sym_id {
#define LB_HOOK(lib, name, sym, w, since, until, ptds) LB_ID_##w,
#define LB_NEED(lib, sym) LB_ID_##sym,
#include "hooks.def"
#undef LB_HOOK
#undef LB_NEED
    LB_SYM_COUNT
};

extern _Atomic(void *) lb_real[LB_SYM_COUNT];
void *lb_sym_resolve(int id);

static inline void *lb_real_get(int id)
{
    void *p = atomic_load_explicit(&lb_real[id], memory_order_relaxed);
    return __builtin_expect(p != NULL, 1) ? p : lb_sym_resolve(id);
}

/* The real function behind a wrapper (or a LB_NEED symbol), with the wrapper's own type. */
#define LB_REAL(w) ((__typeof__(&w))lb_real_get(LB_ID_##w))
/* In a wrapper of w: `real`, the driver's w, or the wrapper returns CUDA_ERROR_NOT_FOUND (the
 * driver lacks the entry point the application called through us). */
#define REAL_OR_FAIL(w)                                                                                             \
    __typeof__(&w) real = LB_REAL(w);                                                                               \
    if (!real)                                                                                                      \
        return CUDA_ERROR_NOT_FOUND

/* glibc's dlsym (never our interposed one). */
typedef void *(*dlsym_fn)(void *, const char *);
dlsym_fn lb_real_dlsym_fn(void);
void *lb_real_dlsym(void *handle, const char *name);

#endif
