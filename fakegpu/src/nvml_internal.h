/*
 * libnvidia-ml.so.1's state. Device handles point into static tables (one entry per GPU, one per
 * possible MIG instance) that live as long as the library: a handle kept across nvmlShutdown is
 * never dangling, and a MIG handle is recognised by which table it points into.
 */
#ifndef FG_NVML_INTERNAL_H
#define FG_NVML_INTERNAL_H

#include <pthread.h>

#include <limitbed/nvml_abi.h>

#include "config.h"
#include "state.h"

/* Inside fakegpu a name means the symbol it spells (see cuda_internal.h). */
#undef nvmlInit
#undef nvmlDeviceGetPciInfo
#undef nvmlDeviceGetCount
#undef nvmlDeviceGetHandleByIndex
#undef nvmlDeviceGetHandleByPciBusId
#undef nvmlDeviceGetComputeRunningProcesses

typedef struct fg_nvdev {
    uint32_t magic;
    unsigned phys;
    int mig; /* -1 for a GPU handle */
} fg_nvdev;

typedef struct fg_nvml {
    pthread_mutex_t mu; /* guards refs, cfg and st across init/shutdown */
    int refs;           /* nvmlInit calls not yet matched by nvmlShutdown */
    unsigned inits;     /* first inits so far (each may read another profile and state) */
    fg_config cfg;
    fg_state st;
    fg_nvdev gpu[FG_MAX_DEVICES];
    fg_nvdev mig[FG_MAX_DEVICES][FG_MAX_MIG];
} fg_nvml;

extern fg_nvml fg_nv;

/* Initialised, and not the target of FAKEGPU_NVML_ERROR: NVML_SUCCESS or the error to return. */
nvmlReturn_t fg_nv_enter(const char *fn);
#define NV_ENTER()                                                                                                     \
    do {                                                                                                               \
        nvmlReturn_t r_ = fg_nv_enter(__func__);                                                                       \
        if (r_ != NVML_SUCCESS)                                                                                        \
            return r_;                                                                                                 \
    } while (0)

/* Resolves a handle; NULL for anything that is not one of ours. */
const fg_nvdev *fg_nv_handle(nvmlDevice_t h);
/* NVML_ERROR_GPU_IS_LOST when FAKEGPU_LOST_DEVICE names the handle's GPU. */
nvmlReturn_t fg_nv_alive(const fg_nvdev *d);
/* A whole GPU or one MIG instance of it, from the profile. */
const fg_device *fg_nv_device(const fg_nvdev *d);
/* Bytes in use on a handle: a GPU in MIG mode sums its instances. Takes the state lock. */
uint64_t fg_nv_used(const fg_nvdev *d);
uint64_t fg_nv_total(const fg_nvdev *d);

#endif
