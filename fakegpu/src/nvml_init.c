/* nvmlInit/Shutdown (reference counted, as in the real library) and the system queries. */
#include <string.h>

#include "nvml_internal.h"

fg_nvml fg_nv = {.mu = PTHREAD_MUTEX_INITIALIZER, .st = FG_STATE_DETACHED};

#define GPU_MAGIC 0x47505531u /* "GPU1" */
#define MIG_MAGIC 0x4d494731u /* "MIG1" */

nvmlReturn_t fg_nv_enter(const char *fn) {
    if (__atomic_load_n(&fg_nv.refs, __ATOMIC_ACQUIRE) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    const fg_faults *f = &fg_nv.cfg.faults;
    if (f->nvml_call[0] && strcmp(f->nvml_call, fn) == 0)
        return (nvmlReturn_t)f->nvml_error;
    return NVML_SUCCESS;
}

/* The profile is (re)read when the count goes from 0 to 1, so that one process can look at
 * another profile after a full shutdown (the Go tests do). */
static nvmlReturn_t first_init(const char *fn) {
    char err[1024];
    if (fg_config_load(&fg_nv.cfg) != 0)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    if (fg_nv.cfg.faults.nvml_call[0] && strcmp(fg_nv.cfg.faults.nvml_call, fn) == 0)
        return (nvmlReturn_t)fg_nv.cfg.faults.nvml_error;
    if (fg_state_attach(&fg_nv.st, fg_nv.cfg.state_path, fg_nv.cfg.identity, fg_nv.cfg.prof.nunits, err, sizeof err)) {
        fg_log("%s", err);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    fg_nv.inits++; /* another state, maybe: nothing listed before stays listed (nvml_process.c) */
    for (unsigned d = 0; d < FG_MAX_DEVICES; d++) {
        fg_nv.gpu[d] = (fg_nvdev){GPU_MAGIC, d, -1};
        for (int m = 0; m < FG_MAX_MIG; m++)
            fg_nv.mig[d][m] = (fg_nvdev){MIG_MAGIC, d, m};
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t init(const char *fn) {
    pthread_mutex_lock(&fg_nv.mu);
    nvmlReturn_t r = fg_nv.refs == 0 ? first_init(fn) : NVML_SUCCESS;
    if (r == NVML_SUCCESS)
        __atomic_add_fetch(&fg_nv.refs, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&fg_nv.mu);
    return r;
}

FG_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags; /* NO_GPUS / NO_ATTACH change nothing for a fake device */
    return init(__func__);
}
FG_EXPORT nvmlReturn_t nvmlInit_v2(void) { return init(__func__); }
FG_EXPORT nvmlReturn_t nvmlInit(void);
FG_EXPORT nvmlReturn_t nvmlInit(void) { return init(__func__); }

FG_EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&fg_nv.mu);
    nvmlReturn_t r = NVML_SUCCESS;
    if (fg_nv.refs == 0)
        r = NVML_ERROR_UNINITIALIZED;
    else if (__atomic_sub_fetch(&fg_nv.refs, 1, __ATOMIC_RELEASE) == 0)
        fg_state_detach(&fg_nv.st);
    pthread_mutex_unlock(&fg_nv.mu);
    return r;
}

static nvmlReturn_t copy_out(char *dst, unsigned int len, const char *src) {
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    NV_ENTER();
    return copy_out(version, length, fg_nv.cfg.prof.driver_version);
}

FG_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    NV_ENTER();
    return copy_out(version, length, fg_nv.cfg.prof.nvml_version);
}

FG_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    NV_ENTER();
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = (int)fg_nv.cfg.prof.cuda_version;
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    NV_ENTER();
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = (int)fg_nv.cfg.prof.cuda_version;
    return NVML_SUCCESS;
}

const fg_nvdev *fg_nv_handle(nvmlDevice_t h) {
    uintptr_t p = (uintptr_t)h, g = (uintptr_t)fg_nv.gpu, m = (uintptr_t)fg_nv.mig;
    const fg_nvdev *d = NULL;
    if (p >= g && p < g + sizeof fg_nv.gpu && (p - g) % sizeof(fg_nvdev) == 0)
        d = (const fg_nvdev *)h;
    else if (p >= m && p < m + sizeof fg_nv.mig && (p - m) % sizeof(fg_nvdev) == 0)
        d = (const fg_nvdev *)h;
    if (!d || d->phys >= fg_nv.cfg.prof.ndev)
        return NULL;
    const fg_device *dv = &fg_nv.cfg.prof.dev[d->phys];
    if (d->mig >= 0 && (!dv->mig_enabled || (unsigned)d->mig >= dv->nmig))
        return NULL;
    return d;
}

nvmlReturn_t fg_nv_alive(const fg_nvdev *d) {
    return fg_nv.cfg.faults.lost_device == (int)d->phys ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

const fg_device *fg_nv_device(const fg_nvdev *d) { return &fg_nv.cfg.prof.dev[d->phys]; }

uint64_t fg_nv_total(const fg_nvdev *d) {
    const fg_device *dv = fg_nv_device(d);
    return (d->mig >= 0 ? dv->mig[d->mig].memory_mib : dv->memory_mib) * FG_MIB;
}

uint64_t fg_nv_used(const fg_nvdev *d) {
    const fg_device *dv = fg_nv_device(d);
    uint64_t used = 0;
    if (fg_state_lock(&fg_nv.st) != 0) /* also reclaims dead processes' memory */
        return 0;
    if (d->mig >= 0)
        used = fg_state_unit_used(&fg_nv.st, dv->mig[d->mig].unit);
    else if (dv->mig_enabled)
        for (unsigned m = 0; m < dv->nmig; m++)
            used += fg_state_unit_used(&fg_nv.st, dv->mig[m].unit);
    else
        used = fg_state_unit_used(&fg_nv.st, dv->unit);
    fg_state_unlock(&fg_nv.st);
    return used;
}
