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

#define LIMITBED_CUDA_LEGACY_V1 /* the legacy entry points are defined here under their own names */
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
#undef cuStreamDestroy
#undef cuStreamBeginCapture
#undef cuGraphAddKernelNode
#undef cuMemGetAddressRange
#undef cuModuleGetGlobal
#undef cuEventDestroy

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
/* The same on the current context's device (after cuInit). */
uint64_t fg_cu_kernel_ns_here(CUfunction f, uint64_t blocks, void **params);
CUresult cuStreamBeginCapture(CUstream hStream);
CUresult cuStreamBeginCapture_ptsz(CUstream hStream);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph);
CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus);
CUresult cuStreamSynchronize_ptsz(CUstream hStream);
CUresult cuStreamQuery(CUstream hStream);
CUresult cuEventDestroy(CUevent hEvent);
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
CUresult cuStreamQuery_ptsz(CUstream hStream);
CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority);
/* The CUDA 10-11 layout of the kernel node parameters (cuGraphAddKernelNode, the v1 symbol). */
typedef struct CUDA_KERNEL_NODE_PARAMS_v1_st {
    CUfunction func;
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    void **kernelParams;
    void **extra;
} CUDA_KERNEL_NODE_PARAMS_v1;
CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                              size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
                            size_t bufferSize);
CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
                               size_t bufferSize);
CUresult cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out);
CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value);
CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph, void *params);
CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
                           CUgraphExecUpdateResult *updateResult_out);

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
    uint64_t limits[8]; /* cuCtxSetLimit values, 0: the default (cuda_limits.c) */
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

/* A module's part in a context's death and in a forked child (cuda_process.c): each module that
 * keeps a table adds itself with fg_cu_observe from a constructor, so neither the context's file
 * nor the process's calls it by name. ctx_gone runs with fg_cu.mu held, stage by stage: the
 * allocation table first (it gives pool allocations back), then what the device keeps in reserve
 * (pools, graph memory), then what the context itself held (limits, modules). */
enum { FG_CU_STAGE_ALLOCATIONS, FG_CU_STAGE_RESERVES, FG_CU_STAGE_CONTEXT, FG_CU_STAGES };
typedef struct fg_cu_observer {
    void (*ctx_gone)(fg_ctx *c); /* the context is destroyed (a primary one: reset) */
    void (*forget_all)(void);    /* forked child: the parent's objects stay the parent's */
} fg_cu_observer;
/* Registration at load time only; a list that is full makes cuInit fail (never a module left out). */
void fg_cu_observe(const fg_cu_observer *o, int stage);
/* Every registered module, in stage order (cuda_ctx.c, fg_cu.mu held). */
void fg_cu_ctx_gone(fg_ctx *c);

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

/* A charge of device memory in the shared state outside the allocation table (VMM physical
 * allocations, pool and graph reserves): 0 or CUDA_ERROR_OUT_OF_MEMORY. Takes the state lock. */
CUresult fg_mem_charge(int ordinal, uint64_t bytes);
void fg_mem_uncharge(int ordinal, uint64_t bytes);
/* Rounded up to the allocation granule. */
static inline uint64_t fg_granules(uint64_t size) { return (size + FG_GRANULE - 1) / FG_GRANULE * FG_GRANULE; }

/* VMM (cuda_vmm.c): a virtual range outside every device's allocation window. 0 when exhausted. */
CUdeviceptr fg_va_reserve(uint64_t size, uint64_t align);

/* Pools (cuda_pool.c). Called with fg_cu.mu held. */
struct fg_pool;
struct fg_pool *fg_pool_current(int ordinal);
int fg_pool_valid(const struct fg_pool *p);
int fg_pool_dev(const struct fg_pool *p);
CUresult fg_pool_take(struct fg_pool *p, uint64_t bytes);
void fg_pool_give(struct fg_pool *p, uint64_t bytes);
/* A synchronisation point: every pool of the device (-1: all) gives back what is above its
 * release threshold. */
void fg_pool_sync(int ordinal);
/* Allocation from a pool (cuda_mem.c): an address in the table, its bytes taken from the pool. */
CUresult fg_mem_alloc_pool(CUdeviceptr *out, size_t size, struct fg_pool *p);

/* Streams, capture and graphs (cuda_capture.c, cuda_graph_exec.c). A capturing stream records instead of running:
 * each returns 1 (and *r) when hStream is capturing. */
int fg_capture_alloc(CUstream hStream, size_t size, CUdeviceptr *dptr, CUresult *r);
int fg_capture_free(CUstream hStream, CUdeviceptr dptr, CUresult *r);
int fg_capture_kernel(CUstream hStream, CUfunction f, uint64_t blocks, uint64_t ns, CUresult *r);
/* A free of a graph allocation outside its graph; 1 if dptr was one. Called with fg_cu.mu held. */
int fg_graph_free_ptr(CUdeviceptr dptr);
/* Simulated execution of blocks thread blocks of f on the current context (cuda_launch.c). */
CUresult fg_launch(CUfunction f, uint64_t blocks, uint64_t ns);
/* A kernel was queued on the unit (cuda_event.c counts them; state lock held). */
void fg_event_submitted(unsigned unit);
/* Waits until the work this process queued on the context's device has run (cuCtxSynchronize,
 * cuStreamSynchronize: fakegpu keeps one queue per process and device). */
CUresult fg_launch_drain(const fg_ctx *c);
/* CUDA_SUCCESS when that work has run, CUDA_ERROR_NOT_READY while some is queued (cuStreamQuery). */
CUresult fg_launch_query(const fg_ctx *c);

/* The time an allocation spends in the driver, set by fakegpuSetAllocDelayMs (cuda_charge.c). */
void fg_alloc_delay(void);
/* Kinds of the allocation table (cuda_mem.c). */
enum { FG_K_MEM, FG_K_MANAGED, FG_K_PITCH, FG_K_ASYNC, FG_K_ARRAY, FG_K_MIPMAP, FG_K_IPC };
/* Frees the table entry at p if its kind is one of `kinds` (a bit mask of FG_K_*). */
CUresult fg_mem_free(CUdeviceptr p, unsigned kinds);
/* A device allocation of the current context's device, of a kind freed by its own call; low: below
 * 4 GiB (the legacy entry points' 32-bit pointers). cuda_mem.c. */
CUresult fg_mem_alloc_kind(CUdeviceptr *out, size_t size, int kind, int low);
/* Each device's window of fake addresses: no allocation is larger. */
#define FG_VA_WINDOW (1ULL << 40)
/* A CUDA array (cuda_array.c); low as above. */
CUresult fg_array_alloc(CUarray *pHandle, size_t w, size_t h, size_t d, CUarray_format f, unsigned ch, int low);
/* The allocation containing p: its base and the size it was asked for. */
CUresult fg_mem_range(CUdeviceptr p, CUdeviceptr *base, uint64_t *size);
/* What a legacy IPC handle carries (cuda_ipc.c): the shared entry of the state and its size. */
typedef struct fg_ipc_ref {
    uint64_t id, nonce, size;
    unsigned unit;
} fg_ipc_ref;
/* The exporter: the cuMemAlloc'd allocation at base p becomes a shared allocation (once). */
CUresult fg_mem_ipc_export(CUdeviceptr p, fg_ipc_ref *ref);
/* The importer: the shared allocation at a new address of the current context. */
CUresult fg_mem_ipc_open(CUdeviceptr *out, const fg_ipc_ref *ref);

/* What a context's cuCtxSetLimit values hold beyond the defaults (cuda_limits.c). */
uint64_t fg_limit_extra(const fg_ctx *c);
/* Modules (cuda_kernels.c, cuda_modules.c): load an image into the current context, charging the
 * device memory its globals take; every module of a destroyed context goes with it. */
CUresult fg_module_load(CUmodule *module, const void *image, size_t len);
CUresult fg_module_unload(CUmodule module);

/* Context charge: a primary or created context costs the profile's context_mib. */
CUresult fg_ctx_charge(int ordinal, int add);

#endif
