/* NVML hooks: nvidia-smi-like tools see the container's view of a limited device: total = limit,
 * used = what the container's processes allocated, free = the rest (clamped at 0). Limits are
 * per CUDA ordinal (CUDA_DEVICE_MEMORY_LIMIT_<i>); an NVML device is matched to its ordinal by
 * UUID. */
#include <pthread.h>
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

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML spells a GPU's UUID. */
static void uuid_str(const char *bytes, char out[48])
{
    static const char hex[] = "0123456789abcdef";
    char *o = out;
    memcpy(o, "GPU-", 4), o += 4;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *o++ = '-';
        *o++ = hex[(unsigned char)bytes[i] >> 4];
        *o++ = hex[(unsigned char)bytes[i] & 15];
    }
    *o = '\0';
}

/* The CUDA ordinal of an NVML device, matched by UUID: with CUDA_VISIBLE_DEVICES or
 * CUDA_DEVICE_ORDER the two orders differ. Before CUDA is initialised in the process (an NVML-only
 * tool), the NVML index is taken as the ordinal. -1: the device is not visible to CUDA. */
static int cuda_ordinal(nvmlDevice_t device, unsigned idx)
{
    __typeof__(&nvmlDeviceGetUUID) nu = LB_REAL(nvmlDeviceGetUUID);
    __typeof__(&cuDeviceGetCount) count = LB_REAL(cuDeviceGetCount);
    __typeof__(&cuDeviceGetUuid) cu = LB_REAL(cuDeviceGetUuid);
    char want[96];
    int n = 0;
    lb_guard_enter();
    int cuda_up = count && cu && count(&n) == CUDA_SUCCESS;
    int have = nu && nu(device, want, sizeof want) == NVML_SUCCESS;
    int found = cuda_up ? -1 : (int)idx;
    for (int d = 0; cuda_up && have && d < n && d < LB_REGION_MAX_DEVICES && found < 0; d++) {
        CUuuid u;
        char s[48];
        if (cu(&u, d) != CUDA_SUCCESS)
            continue;
        uuid_str(u.bytes, s);
        if (strcmp(s, want) == 0)
            found = d;
    }
    if (cuda_up && !have)
        found = (int)idx;
    lb_guard_leave();
    return found;
}

/* 1 and the device's limit/usage if the device is virtualised. */
static int view(nvmlDevice_t device, uint64_t *lim, uint64_t *used)
{
    unsigned nidx;
    __typeof__(&nvmlDeviceGetIndex) gi = LB_REAL(nvmlDeviceGetIndex);
    if (!lb_active() || !gi || gi(device, &nidx) != NVML_SUCCESS)
        return 0;
    int ord = cuda_ordinal(device, nidx);
    if (ord < 0 || ord >= LB_REGION_MAX_DEVICES)
        return 0;
    unsigned idx = (unsigned)ord;
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
