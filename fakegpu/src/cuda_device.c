/* Device queries: answered from the profile. */
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"

#define DEV_CHECK(dev)                                                                                                 \
    do {                                                                                                               \
        CUresult r_ = fg_cu_ready();                                                                                   \
        if (r_ != CUDA_SUCCESS)                                                                                        \
            return r_;                                                                                                 \
        if (!fg_cu_dev_valid(dev))                                                                                     \
            return CUDA_ERROR_INVALID_DEVICE;                                                                          \
    } while (0)

FG_EXPORT CUresult cuDeviceGetCount(int *count) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = fg_cu.ndev;
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_cu_dev_valid(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    DEV_CHECK(dev);
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    fg_copy(name, (size_t)len, fg_cu.dev[dev].name);
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
    DEV_CHECK(dev);
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(uuid->bytes, fg_cu.dev[dev].uuid, 16);
    return CUDA_SUCCESS;
}

/* _v2 differs from the original only for MIG instances in the real driver; here both report
 * the instance's own UUID. */
FG_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid(uuid, dev); }

FG_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    DEV_CHECK(dev);
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = fg_cu.dev[dev].total;
    return CUDA_SUCCESS;
}

/* The pre-3.2 spelling reports an unsigned int: clamped rather than wrapped. */
FG_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    size_t b;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuDeviceTotalMem_v2(&b, dev);
    if (r == CUDA_SUCCESS)
        *bytes = b > 0xffffffffu ? 0xffffffffu : (unsigned int)b;
    return r;
}

FG_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    DEV_CHECK(dev);
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    const fg_cudev *c = &fg_cu.dev[dev];
    unsigned dom = 0, bus = 0, slot = 0, fn = 0;
    sscanf(fg_cu.cfg.prof.dev[c->phys].pci_bus_id, "%x:%x:%x.%x", &dom, &bus, &slot, &fn);
    int v;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = 1410000; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = (int)c->sm_count; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: v = (int)bus; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: v = (int)slot; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: v = (int)dom; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = 1215000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = 5120; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = 41943040; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = (int)c->cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = (int)c->cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: v = 1; break;
    default:
        /* Attributes the profile does not model read 0, like an unsupported feature; numbers
         * beyond the driver's range are invalid, as in the real driver. */
        if ((int)attrib <= 0 || (int)attrib > 140)
            return CUDA_ERROR_INVALID_VALUE;
        v = 0;
    }
    *pi = v;
    return CUDA_SUCCESS;
}
