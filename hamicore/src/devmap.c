/*
 * Which physical GPU a CUDA ordinal is (devmap.h).
 *
 * Memory is accounted per physical GPU, never per CUDA ordinal: CUDA_VISIBLE_DEVICES and
 * CUDA_DEVICE_ORDER are the process's own to set, and they renumber its ordinals (with
 * CUDA_VISIBLE_DEVICES=1,0, ordinal 0 is the second GPU; with the default FASTEST_FIRST order a
 * faster second GPU is ordinal 0 too). The region's per-device counters, the limits file's
 * CUDA_DEVICE_MEMORY_LIMIT_<i> and NVML all use one index the process cannot change: the GPU's
 * NVML index (the container's GPUs in PCI order). A CUDA device is matched to it by UUID; a MIG
 * instance belongs to its parent GPU. When the driver cannot say which GPU a device is (no NVML,
 * no UUID match), the device has no index: its allocations are refused (memory.c), never
 * charged to whichever GPU happens to share its ordinal.
 */
#include "devmap.h"

#include <stdatomic.h>
#include <string.h>

#include "guard.h"
#include "log.h"
#include "region.h"
#include "symbols.h"

#define ORD_CACHE 256

/* index + 1 per CUDA ordinal; 0: not known yet. Device identities do not change in a process. */
static _Atomic int g_phys[ORD_CACHE];
static _Atomic int g_nvml_up, g_stamped;

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" / "MIG-…", as NVML spells a UUID. */
void lb_uuid_str(const char *bytes, const char *prefix, char out[48])
{
    static const char hex[] = "0123456789abcdef";
    char *o = out;
    memcpy(o, prefix, 4), o += 4;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *o++ = '-';
        *o++ = hex[(unsigned char)bytes[i] >> 4];
        *o++ = hex[(unsigned char)bytes[i] & 15];
    }
    *o = '\0';
}

/* NVML_SUCCESS, or why NVML cannot answer. */
static nvmlReturn_t nvml_up(void)
{
    if (atomic_load_explicit(&g_nvml_up, memory_order_acquire))
        return NVML_SUCCESS;
    __typeof__(&nvmlInit_v2) init = LB_REAL(nvmlInit_v2);
    nvmlReturn_t r = init ? init() : NVML_ERROR_LIBRARY_NOT_FOUND;
    if (r == NVML_SUCCESS)
        atomic_store_explicit(&g_nvml_up, 1, memory_order_release);
    return r;
}

/* Write NVML's GPUs into the region, by index: what the monitor reads to know which physical GPUs
 * the container's counters are (every index this process can see; the same for every process of
 * the container). */
static void stamp_uuids(unsigned n)
{
    __typeof__(&nvmlDeviceGetHandleByIndex_v2) by_index = LB_REAL(nvmlDeviceGetHandleByIndex_v2);
    __typeof__(&nvmlDeviceGetUUID) nu = LB_REAL(nvmlDeviceGetUUID);
    if (!lb_region || !by_index || !nu || atomic_exchange(&g_stamped, 1))
        return;
    for (unsigned i = 0; i < n && i < LB_REGION_MAX_DEVICES; i++) {
        nvmlDevice_t h;
        char s[96];
        uint8_t b[16];
        if (by_index(i, &h) != NVML_SUCCESS || nu(h, s, sizeof s) != NVML_SUCCESS || lb_uuid_bytes(s, b) != 0)
            continue;
        memcpy(lb_region->dev_uuid[i], b, sizeof b);
    }
}

int lb_uuid_bytes(const char *s, uint8_t out[16])
{
    if (strncmp(s, "GPU-", 4) != 0 && strncmp(s, "MIG-", 4) != 0)
        return -1;
    int n = 0;
    for (const char *p = s + 4; *p && n < 32; p++) {
        int v = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10 : -1;
        if (*p == '-')
            continue;
        if (v < 0)
            return -1;
        out[n / 2] = (uint8_t)(n % 2 ? out[n / 2] | v : v << 4);
        n++;
    }
    return n == 32 ? 0 : -1;
}

/* The NVML index of ordinal ord; -1 when it cannot be told (*why says what). Guarded driver calls. */
static int lookup(int ord, const char **why)
{
    __typeof__(&cuDeviceGetUuid) cu = LB_REAL(cuDeviceGetUuid);
    __typeof__(&nvmlDeviceGetCount_v2) count = LB_REAL(nvmlDeviceGetCount_v2);
    __typeof__(&nvmlDeviceGetHandleByIndex_v2) by_index = LB_REAL(nvmlDeviceGetHandleByIndex_v2);
    __typeof__(&nvmlDeviceGetHandleByUUID) by_uuid = LB_REAL(nvmlDeviceGetHandleByUUID);
    __typeof__(&nvmlDeviceGetDeviceHandleFromMigDeviceHandle) parent = LB_REAL(nvmlDeviceGetDeviceHandleFromMigDeviceHandle);
    __typeof__(&nvmlDeviceGetIndex) index = LB_REAL(nvmlDeviceGetIndex);
    __typeof__(&nvmlDeviceGetUUID) nu = LB_REAL(nvmlDeviceGetUUID);
    CUuuid u;
    char want[48], got[96];
    unsigned n = 0;
    int found = -1;
    nvmlReturn_t nr;
    if (!count || !by_index || !nu) {
        *why = "libnvidia-ml.so.1 cannot be loaded";
        return -1;
    }
    if (!cu || cu(&u, ord) != CUDA_SUCCESS) {
        *why = "the driver does not give its UUID";
        return -1;
    }
    if ((nr = nvml_up()) != NVML_SUCCESS || (nr = count(&n)) != NVML_SUCCESS) {
        *why = nr == NVML_ERROR_LIBRARY_NOT_FOUND ? "libnvidia-ml.so.1 cannot be loaded" : "NVML cannot be initialised";
        return -1;
    }
    *why = "NVML lists no GPU with its UUID";
    stamp_uuids(n);
    lb_uuid_str(u.bytes, "GPU-", want);
    for (unsigned i = 0; i < n && found < 0; i++) {
        nvmlDevice_t h;
        if (by_index(i, &h) == NVML_SUCCESS && nu(h, got, sizeof got) == NVML_SUCCESS && strcmp(got, want) == 0)
            found = (int)i;
    }
    if (found < 0 && by_uuid && parent && index) {
        /* A MIG instance: its memory is its parent GPU's. */
        nvmlDevice_t mig, gpu;
        unsigned i;
        lb_uuid_str(u.bytes, "MIG-", want);
        if (by_uuid(want, &mig) == NVML_SUCCESS && parent(mig, &gpu) == NVML_SUCCESS && index(gpu, &i) == NVML_SUCCESS)
            found = (int)i;
    }
    return found;
}

int lb_phys_index(int ord)
{
    if (ord < 0)
        return -1;
    if (ord < ORD_CACHE) {
        int c = atomic_load_explicit(&g_phys[ord], memory_order_relaxed);
        if (c)
            return c - 1;
    }
    const char *why = "";
    lb_guard_enter();
    int found = lookup(ord, &why);
    lb_guard_leave();
    if (found < 0) {
        static _Atomic int logged;
        if (!atomic_exchange(&logged, 1))
            LB_ERROR("CUDA device %d: cannot tell which physical GPU it is (%s): its allocations are refused, since "
                     "memory is charged to the GPU, not to the ordinal",
                     ord, why);
        return -1;
    }
    if (ord < ORD_CACHE)
        atomic_store_explicit(&g_phys[ord], found + 1, memory_order_relaxed);
    return found;
}

int lb_nvml_index(int dev)
{
    int i = lb_phys_index(dev);
    return i >= 0 ? i : dev;
}
