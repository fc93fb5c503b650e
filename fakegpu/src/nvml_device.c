/*
 * Device handles and per-device queries. Identity queries (handles, index, name, UUID, PCI,
 * minor number) keep answering for a lost GPU so that a health checker can name it; everything
 * that would have to talk to the GPU returns NVML_ERROR_GPU_IS_LOST.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "nvml_internal.h"

#define HANDLE(h, d)                                                                                                   \
    const fg_nvdev *d = fg_nv_handle(h);                                                                               \
    if (!d)                                                                                                            \
    return NVML_ERROR_INVALID_ARGUMENT

FG_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    NV_ENTER();
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = fg_nv.cfg.prof.ndev;
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount);
FG_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) {
    NV_ENTER();
    return nvmlDeviceGetCount_v2(deviceCount);
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    NV_ENTER();
    if (!device || index >= fg_nv.cfg.prof.ndev)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)&fg_nv.gpu[index];
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device);
FG_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    NV_ENTER();
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    NV_ENTER();
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    const fg_profile *p = &fg_nv.cfg.prof;
    for (unsigned d = 0; d < p->ndev; d++) {
        if (strcasecmp(p->dev[d].uuid, uuid) == 0)
            return *device = (nvmlDevice_t)&fg_nv.gpu[d], NVML_SUCCESS;
        for (unsigned m = 0; p->dev[d].mig_enabled && m < p->dev[d].nmig; m++)
            if (strcasecmp(p->dev[d].mig[m].uuid, uuid) == 0)
                return *device = (nvmlDevice_t)&fg_nv.mig[d][m], NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_FOUND;
}

/* Bus ids compare by value: "0000:05:00.0" and "00000000:05:00.0" name the same device. */
static int bus_id(const char *s, unsigned v[4]) { return sscanf(s, "%x:%x:%x.%x", &v[0], &v[1], &v[2], &v[3]) == 4; }

FG_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
    NV_ENTER();
    unsigned want[4], have[4];
    if (!pciBusId || !device || !bus_id(pciBusId, want))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned d = 0; d < fg_nv.cfg.prof.ndev; d++)
        if (bus_id(fg_nv.cfg.prof.dev[d].pci_bus_id, have) && memcmp(want, have, sizeof want) == 0)
            return *device = (nvmlDevice_t)&fg_nv.gpu[d], NVML_SUCCESS;
    return NVML_ERROR_NOT_FOUND;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device);
FG_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device) {
    NV_ENTER();
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

static nvmlReturn_t copy_out(char *dst, unsigned int len, const char *src) {
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    NV_ENTER();
    HANDLE(device, d);
    const fg_device *dv = fg_nv_device(d);
    return copy_out(uuid, length, d->mig >= 0 ? dv->mig[d->mig].uuid : dv->uuid);
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    NV_ENTER();
    HANDLE(device, d);
    const fg_device *dv = fg_nv_device(d);
    char buf[FG_NAME_LEN + 48];
    if (d->mig >= 0)
        snprintf(buf, sizeof buf, "%s MIG %s", dv->name, dv->mig[d->mig].profile);
    else
        fg_copy(buf, sizeof buf, dv->name);
    return copy_out(name, length, buf);
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    NV_ENTER();
    HANDLE(device, d);
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = d->mig >= 0 ? (unsigned)d->mig : d->phys; /* a MIG handle: its index under its GPU, as NVML documents */
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    NV_ENTER();
    HANDLE(device, d);
    if (!minorNumber)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = fg_nv_device(d)->minor;
    return NVML_SUCCESS;
}

static nvmlReturn_t pci_info(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    HANDLE(device, d);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    const fg_device *dv = fg_nv_device(d);
    unsigned v[4] = {0, 0, 0, 0};
    bus_id(dv->pci_bus_id, v);
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", v[0] & 0xffff, v[1] & 0xff, v[2] & 0xff,
             v[3] & 0xf);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", v[0], v[1] & 0xff, v[2] & 0xff, v[3] & 0xf);
    pci->domain = v[0], pci->bus = v[1], pci->device = v[2];
    pci->pciDeviceId = dv->pci_device_id;
    pci->pciSubSystemId = dv->pci_device_id;
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    NV_ENTER();
    return pci_info(device, pci);
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci);
FG_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    NV_ENTER();
    return pci_info(device, pci);
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci);
FG_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    NV_ENTER();
    return pci_info(device, pci);
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    NV_ENTER();
    HANDLE(device, d);
    nvmlReturn_t r = fg_nv_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t total = fg_nv_total(d), used = fg_nv_used(d);
    memory->total = total;
    memory->used = used;
    memory->free = used < total ? total - used : 0;
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    NV_ENTER();
    HANDLE(device, d);
    nvmlReturn_t r = fg_nv_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    uint64_t total = fg_nv_total(d), used = fg_nv_used(d);
    memory->total = total;
    memory->reserved = 0; /* the fake driver reserves nothing for itself */
    memory->used = used;
    memory->free = used < total ? total - used : 0;
    return NVML_SUCCESS;
}

/* Busy fraction of the simulated engine over the sampling window (FAKEGPU_UTIL_WINDOW_MS).
 * Not supported in MIG mode, as on a real GPU. */
FG_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    NV_ENTER();
    HANDLE(device, d);
    nvmlReturn_t r = fg_nv_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    const fg_device *dv = fg_nv_device(d);
    if (d->mig >= 0 || dv->mig_enabled)
        return NVML_ERROR_NOT_SUPPORTED;
    if (fg_state_lock(&fg_nv.st) != 0)
        return NVML_ERROR_UNKNOWN;
    utilization->gpu = fg_state_util(&fg_nv.st, dv->unit, 0, fg_now_ns(), fg_nv.cfg.util_window_ns);
    fg_state_unlock(&fg_nv.st);
    utilization->memory = 0;
    return NVML_SUCCESS;
}

/* The SM (and graphics) clock: the profile's sm_clock_mhz (the clock at full load, default 1500)
 * times FAKEGPU_POWER_BOOST's speed factor, so a lightly loaded device reports the higher clock a
 * power-capped GPU runs at (cuda_launch.c); the memory clock is the profile's (mem_clock_mhz). */
FG_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    NV_ENTER();
    HANDLE(device, d);
    nvmlReturn_t r = fg_nv_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!clock || (unsigned)type >= NVML_CLOCK_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    const fg_device *dv = fg_nv_device(d);
    if (type == NVML_CLOCK_MEM) {
        *clock = dv->mem_clock_mhz;
        return NVML_SUCCESS;
    }
    if (fg_state_lock(&fg_nv.st) != 0)
        return NVML_ERROR_UNKNOWN;
    uint64_t speed = fg_state_speed(&fg_nv.st, dv->unit, fg_now_ns(), fg_nv.cfg.power_boost);
    fg_state_unlock(&fg_nv.st);
    *clock = (unsigned)(fg_nv.cfg.sm_clock_mhz * speed / 100);
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch) {
    NV_ENTER();
    HANDLE(device, d);
    nvmlReturn_t r = fg_nv_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!arch)
        return NVML_ERROR_INVALID_ARGUMENT;
    *arch = fg_nv_device(d)->architecture;
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    NV_ENTER();
    HANDLE(device, d);
    nvmlReturn_t r = fg_nv_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = (int)fg_nv_device(d)->cc_major;
    *minor = (int)fg_nv_device(d)->cc_minor;
    return NVML_SUCCESS;
}
