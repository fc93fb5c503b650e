/* NVML hooks: nvidia-smi-like tools see the container's view of a limited device: total = limit,
 * used = what the container's processes allocated, free = the rest (clamped at 0). Limits are
 * per GPU in NVML's order (CUDA_DEVICE_MEMORY_LIMIT_<i> is NVML index i, devmap.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "init.h"
#include "region.h"
#include "symbols.h"

#ifdef LIMITBED_LEGACY_HAMI_V2_10
void lb_legacy_apply_file(void);
static pthread_once_t g_legacy_once = PTHREAD_ONCE_INIT;
#endif

static void on_init(void)
{
    lb_active(); /* the same one initialization as the CUDA entry points */
#ifdef LIMITBED_LEGACY_HAMI_V2_10
    /* v2.10: /overrideEnv is read here, after the region was chosen and stamped. */
    pthread_once(&g_legacy_once, lb_legacy_apply_file);
#endif
}

#define NVML_REAL(w)                                                                                                \
    __typeof__(&w) real = LB_REAL(w);                                                                               \
    if (!real)                                                                                                      \
        return NVML_ERROR_FUNCTION_NOT_FOUND

nvmlReturn_t lbw_nvmlInit_v1(void)
{
    NVML_REAL(lbw_nvmlInit_v1);
    on_init();
    return real();
}

LB_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    NVML_REAL(nvmlInit_v2);
    on_init();
    return real();
}

LB_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    NVML_REAL(nvmlInitWithFlags);
    on_init();
    return real(flags);
}

/* 1 and the device's limit/usage if the device is virtualised. The region's devices are NVML's
 * (devmap.h): a GPU's figures are its index's, whatever CUDA ordinal it has in this process. */
static int view(nvmlDevice_t device, uint64_t *lim, uint64_t *used)
{
    unsigned idx;
    __typeof__(&nvmlDeviceGetIndex) gi = LB_REAL(nvmlDeviceGetIndex);
    if (!lb_active() || !gi || gi(device, &idx) != NVML_SUCCESS || idx >= LB_REGION_MAX_DEVICES)
        return 0;
    *lim = lb_region_limit((int)idx);
    if (*lim == LB_MEM_UNLIMITED)
        return 0;
    *used = lb_region_usage((int)idx);
    return 1;
}

LB_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    NVML_REAL(nvmlDeviceGetMemoryInfo);
    nvmlReturn_t r = real(device, memory);
    uint64_t lim, used;
    if (r != NVML_SUCCESS || !memory || !view(device, &lim, &used))
        return r;
    memory->total = lim;
    memory->used = used;
    memory->free = lim > used ? lim - used : 0;
    return r;
}

LB_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    NVML_REAL(nvmlDeviceGetMemoryInfo_v2);
    nvmlReturn_t r = real(device, memory);
    uint64_t lim, used;
    if (r != NVML_SUCCESS || !memory || !view(device, &lim, &used))
        return r;
    memory->total = lim;
    memory->reserved = 0;
    memory->used = used;
    memory->free = lim > used ? lim - used : 0;
    return r;
}
