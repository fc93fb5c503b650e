/*
 * The public NVML calls the real nvidia-smi makes besides the ones fakegpu already answered for
 * its other users (docs/fakegpu.md, "The real nvidia-smi"): each one a stub would have failed in a
 * way nvidia-smi does not take as "not supported" — it gives up on the whole screen ("Internal
 * NVML error" without an event set), prints garbage (field values it never got), or leaves MIG
 * devices out (no attributes or BAR1).
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nvml_internal.h"

#define HANDLE(h, d)                                                                                                   \
    const fg_nvdev *d = fg_nv_handle(h);                                                                               \
    if (!d)                                                                                                            \
    return NVML_ERROR_INVALID_ARGUMENT

/* Event sets: fakegpu never raises an event (no XIDs, no clock changes), so a set is a token. */
static char event_set;

FG_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    NV_ENTER();
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    *set = (nvmlEventSet_t)(void *)&event_set;
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    NV_ENTER();
    return (void *)set == (void *)&event_set ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* Nothing to register (no device raises an event: nvmlDeviceRegisterEvents stays "not
 * supported"), so a wait times out after its timeout, as on a GPU that raised none. */
static nvmlReturn_t wait_set(nvmlEventSet_t set, void *data, unsigned int timeoutms) {
    if ((void *)set != (void *)&event_set || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec ts = {(time_t)(timeoutms / 1000), (long)(timeoutms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) /* the remainder after a signal */
        ;
    return NVML_ERROR_TIMEOUT;
}

FG_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, void *data, unsigned int timeoutms);
FG_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, void *data, unsigned int timeoutms) {
    NV_ENTER();
    return wait_set(set, data, timeoutms);
}

FG_EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, void *data, unsigned int timeoutms);
FG_EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, void *data, unsigned int timeoutms) {
    NV_ENTER();
    return wait_set(set, data, timeoutms);
}

/* Every field is "not supported" in its own nvmlReturn: the call succeeds, as the real one does
 * when a GPU lacks the fields asked (nvidia-smi reads power limits and NVLink counters this way). */
FG_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    NV_ENTER();
    HANDLE(device, d);
    nvmlReturn_t r = fg_nv_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (valuesCount < 0 || (valuesCount > 0 && !values))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    for (int i = 0; i < valuesCount; i++) {
        values[i].timestamp = (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
        values[i].latencyUsec = 0;
        values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        values[i].value.ullVal = 0;
    }
    return NVML_SUCCESS;
}

/* A GPU: its SMs and memory. A MIG instance: its SMs, memory, slices and shared engines. */
FG_EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes) {
    NV_ENTER();
    HANDLE(device, d);
    nvmlReturn_t r = fg_nv_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!attributes)
        return NVML_ERROR_INVALID_ARGUMENT;
    const fg_device *dv = fg_nv_device(d);
    memset(attributes, 0, sizeof *attributes);
    attributes->memorySizeMB = fg_nv_total(d) / FG_MIB;
    if (d->mig < 0) {
        attributes->multiprocessorCount = dv->sm_count;
        return NVML_SUCCESS;
    }
    const fg_mig *m = &dv->mig[d->mig];
    attributes->multiprocessorCount = m->sm_count ? m->sm_count : dv->sm_count / 7; /* as CUDA counts them */
    attributes->sharedCopyEngineCount = m->copy_engines;
    attributes->sharedDecoderCount = m->decoders;
    attributes->sharedEncoderCount = m->encoders;
    attributes->sharedJpegCount = m->jpegs;
    attributes->sharedOfaCount = m->ofas;
    attributes->gpuInstanceSliceCount = m->slices;
    attributes->computeInstanceSliceCount = m->slices;
    return NVML_SUCCESS;
}

/* BAR1: the profile's aperture (a MIG instance gets its share by memory), nothing mapped. */
FG_EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory) {
    NV_ENTER();
    HANDLE(device, d);
    nvmlReturn_t r = fg_nv_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!bar1Memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    const fg_device *dv = fg_nv_device(d);
    uint64_t mib = d->mig < 0 ? dv->bar1_mib : dv->bar1_mib * dv->mig[d->mig].memory_mib / dv->memory_mib;
    uint64_t total = mib * FG_MIB;
    *bar1Memory = (nvmlBAR1Memory_t){total, total, 0};
    return NVML_SUCCESS;
}

/* The name of a process as the caller sees it: argv[0] of /proc/PID/cmdline, else its comm. A
 * PID of another PID namespace names nothing here (NOT_FOUND), as with a real driver in a
 * container. */
FG_EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    NV_ENTER();
    if (!name || length == 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    static const char *const files[] = {"cmdline", "comm"};
    char path[64], buf[1024];
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        snprintf(path, sizeof path, "/proc/%u/%s", pid, files[f]);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = 0;
        buf[strcspn(buf, "\n")] = 0; /* comm ends in a newline; cmdline's first string ends at NUL */
        if (!buf[0])
            continue;
        if (strlen(buf) + 1 > length)
            return NVML_ERROR_INSUFFICIENT_SIZE;
        memcpy(name, buf, strlen(buf) + 1);
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_FOUND;
}
