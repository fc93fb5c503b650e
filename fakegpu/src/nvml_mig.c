/*
 * MIG. The layout is fixed by the profile (instances cannot be created or destroyed here).
 * Only compute capability 8.0 and 9.0 parts (A100/A30, H100/H200) are MIG capable; others answer
 * NVML_ERROR_NOT_SUPPORTED, as an A16 does.
 */
#include "nvml_internal.h"

#define HANDLE(h, d)                                                                                                   \
    const fg_nvdev *d = fg_nv_handle(h);                                                                               \
    if (!d)                                                                                                            \
    return NVML_ERROR_INVALID_ARGUMENT

static int mig_capable(const fg_device *dv) {
    return (dv->cc_major == 8 || dv->cc_major == 9) && dv->cc_minor == 0;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    NV_ENTER();
    HANDLE(device, d);
    nvmlReturn_t r = fg_nv_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!currentMode || !pendingMode || d->mig >= 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    const fg_device *dv = fg_nv_device(d);
    if (!mig_capable(dv))
        return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = *pendingMode = dv->mig_enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    NV_ENTER();
    HANDLE(device, d);
    nvmlReturn_t r = fg_nv_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!count || d->mig >= 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_capable(fg_nv_device(d)))
        return NVML_ERROR_NOT_SUPPORTED;
    *count = FG_MAX_MIG;
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                           nvmlDevice_t *migDevice) {
    NV_ENTER();
    HANDLE(device, d);
    nvmlReturn_t r = fg_nv_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    const fg_device *dv = fg_nv_device(d);
    if (!migDevice || d->mig >= 0 || index >= FG_MAX_MIG)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!dv->mig_enabled || index >= dv->nmig)
        return NVML_ERROR_NOT_FOUND; /* an empty slot, as go-nvml's discovery loop expects */
    *migDevice = (nvmlDevice_t)&fg_nv.mig[d->phys][index];
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
    NV_ENTER();
    HANDLE(migDevice, d);
    if (!device || d->mig < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)&fg_nv.gpu[d->phys];
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    NV_ENTER();
    HANDLE(device, d);
    if (!isMigDevice)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = d->mig >= 0;
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    NV_ENTER();
    HANDLE(device, d);
    if (!id || d->mig < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = fg_nv_device(d)->mig[d->mig].gpu_instance_id;
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    NV_ENTER();
    HANDLE(device, d);
    if (!id || d->mig < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = fg_nv_device(d)->mig[d->mig].compute_instance_id;
    return NVML_SUCCESS;
}
