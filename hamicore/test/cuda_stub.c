/* Link-time stand-in for libcuda.so.1 (like the toolkit's stubs/libcuda.so): allocprobe links
 * against it and runs against whichever libcuda.so.1 the loader finds (fakegpu or a real driver).
 * Never installed in $(OUT)/lib. */
#include "limitbed/cuda_abi.h"
#define V __attribute__((visibility("default")))
V CUresult cuInit(unsigned int f) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuDeviceGet(CUdevice *d, int o) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuCtxSetCurrent(CUcontext c) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuMemFree_v2(CUdeviceptr p) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned f) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pi, size_t w, size_t h, unsigned e) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *p, unsigned long long f) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuMemRelease(CUmemGenericAllocationHandle h) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuArrayDestroy(CUarray a) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuLaunchKernel(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g, unsigned h, CUstream s, void **p, void **x) { return CUDA_ERROR_STUB_LIBRARY; }
V CUresult cuGetProcAddress_v2(const char *s, void **p, int v, cuuint64_t f, CUdriverProcAddressQueryResult *q) { return CUDA_ERROR_STUB_LIBRARY; }
