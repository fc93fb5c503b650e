/*
 * libcuda.so.1's per-process state and the helpers its source files share.
 *
 * Inside fakegpu every name means exactly the symbol it spells: cuda_abi.h's cuda.h-style macros
 * (cuMemAlloc -> cuMemAlloc_v2) are undone here, so that the legacy and the versioned entry
 * points can both be defined and listed in cuda_api.def.
 */
#ifndef FG_CUDA_INTERNAL_H
#define FG_CUDA_INTERNAL_H

#include <pthread.h>

#include <limitbed/cuda_abi.h>

#include "config.h"
#include "state.h"

#undef cuDeviceTotalMem
#undef cuCtxCreate
#undef cuCtxDestroy
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuMemGetInfo
#undef cuMemAlloc
#undef cuMemAllocPitch
#undef cuMemFree
#undef cuArrayCreate
#undef cuArray3DCreate

/* Entry points cuda_abi.h does not declare: legacy spellings, per-thread-stream variants. */
CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
CUresult cuMemGetInfo(unsigned int *free, unsigned int *total);
CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, void *paramsArray, int numParams, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v4(CUcontext *pctx, void *ctxCreateParams, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy(CUcontext ctx);
CUresult cuCtxPushCurrent(CUcontext ctx);
CUresult cuCtxPopCurrent(CUcontext *pctx);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDevicePrimaryCtxReset(CUdevice dev);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                             unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                             unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                        void **kernelParams);

/* The kernel whose first parameter (u64) is the ns each wave of sm_count blocks runs. */
#define FG_SPIN_KERNEL "fakegpu_spin"
/* Simulated duration of one kernel: the spin kernel's own, else the profile's launch_ns +
 * block_ns per block (or FAKEGPU_LAUNCH_NS). Graph kernel nodes are priced the same way. */
uint64_t fg_cu_kernel_ns(CUfunction f, uint64_t blocks, void **params, unsigned sm_count);

/* FG_IS_NONE(x) is 1 for the token NONE and 0 for any identifier (the usual probe idiom), so
 * that cuda_api.def's per_thread column can be turned into "no symbol" without a second list. */
#define FG_CAT_(a, b) a##b
#define FG_CAT(a, b) FG_CAT_(a, b)
#define FG_SECOND(a, b, ...) b
#define FG_PROBE(...) FG_SECOND(__VA_ARGS__, 0, ~)
#define FG_NONE_PROBE_NONE ~, 1
#define FG_IS_NONE(x) FG_PROBE(FG_NONE_PROBE_##x)

#define FG_MAX_CTX 64
#define FG_CTX_LIVE 0x43545831u /* "CTX1" */
#define FG_GRANULE (2 * FG_MIB) /* allocation granularity: what a real GPU's large pages are */

/* A CUDA device ordinal: a GPU, or a MIG instance of a GPU in MIG mode. */
typedef struct fg_cudev {
    unsigned phys;      /* profile device index (NVML index) */
    int mig;            /* MIG instance, -1 for a whole GPU */
    unsigned unit;      /* accounting unit in the shared state */
    uint64_t total;     /* bytes */
    char name[FG_NAME_LEN + 48];
    unsigned char uuid[16];
    unsigned sm_count, cc_major, cc_minor;
} fg_cudev;

typedef struct fg_ctx {
    uint32_t magic;     /* FG_CTX_LIVE while the context exists */
    int dev;            /* ordinal */
    int primary;
    unsigned refs;      /* primary context retain count */
    uint64_t last_end;  /* when its last launched work finishes (cuCtxSynchronize waits for it) */
} fg_ctx;

typedef struct fg_cuda {
    pthread_mutex_t mu; /* guards this struct and the allocation table; taken before the state lock */
    int initialized;
    CUresult init_rc;   /* a failed cuInit stays failed, as with the real driver */
    fg_config cfg;
    fg_state st;
    int ndev;
    fg_cudev dev[FG_MAX_UNITS];
    fg_ctx primary[FG_MAX_UNITS];
    fg_ctx pool[FG_MAX_CTX];
    unsigned long alloc_calls; /* for FAKEGPU_FAIL_ALLOC */
} fg_cuda;

extern fg_cuda fg_cu;

/* CUDA_SUCCESS once cuInit succeeded, else CUDA_ERROR_NOT_INITIALIZED. */
CUresult fg_cu_ready(void);
/* The calling thread's current context, validated; NULL if none or destroyed. */
fg_ctx *fg_cu_current(void);
int fg_cu_ctx_valid(const fg_ctx *c);
int fg_cu_dev_valid(CUdevice d);
/* A device the profile's lost_device fault took off the bus. */
int fg_cu_lost(int ordinal);
/* CUDA_ERROR_INVALID_CONTEXT or a lost device's error for the current context; sets *out. */
CUresult fg_cu_need_ctx(fg_ctx **out);

/* Context charge: a primary or created context costs the profile's context_mib. */
CUresult fg_ctx_charge(int ordinal, int add);
/* Frees every allocation made in ctx (context destroyed or reset). */
void fg_mem_release_ctx(const fg_ctx *ctx);
/* Forked child: the parent's allocations stay the parent's. */
void fg_mem_forget_all(void);
void fg_ctx_forget_all(void);

#endif
