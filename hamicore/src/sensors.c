/* NVML's readings for the fallback controller (controller.c), through the real symbols. */
#include "sensors.h"

#include <stdatomic.h>
#include <time.h>

#include "config.h"
#include "devmap.h"
#include "region.h"
#include "symbols.h"

#define MAX_SAMPLES 256

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The container's processes' pids as NVML reports them: the host pid when known, else the pid
 * (right when the container shares the host's PID namespace, and on fakegpu). */
static int container_pids(unsigned int *pids, int max)
{
    struct lb_region_slot *s = lb_region_slots(lb_region);
    uint32_t hwm = atomic_load(&lb_region->slot_hwm);
    int n = 0;
    for (uint32_t i = 0; i < hwm && i < LB_REGION_MAX_SLOTS && n < max; i++)
        if (atomic_load(&s[i].state) == LB_SLOT_ACTIVE)
            pids[n++] = (unsigned)(s[i].hostpid ? s[i].hostpid : s[i].pid);
    return n;
}

/* NVML's handle of CUDA device d (an ordinal, mapped by UUID); 0 on success. */
static int nvml_device(int d, nvmlDevice_t *h)
{
    __typeof__(&nvmlDeviceGetHandleByIndex_v2) by_index = LB_REAL(nvmlDeviceGetHandleByIndex_v2);
    return !by_index || by_index((unsigned)lb_nvml_index(d), h) != NVML_SUCCESS ? -1 : 0;
}

/* The whole device's utilisation in percent over NVML's last sample period; -1 if unknown. */
static int util_of(nvmlDevice_t h)
{
    __typeof__(&nvmlDeviceGetUtilizationRates) whole = LB_REAL(nvmlDeviceGetUtilizationRates);
    nvmlUtilization_t u;
    return !whole || whole(h, &u) != NVML_SUCCESS ? -1 : (int)u.gpu;
}

static int device_util(int d)
{
    nvmlDevice_t h;
    return nvml_device(d, &h) ? -1 : util_of(h);
}

/* The device's SM clock in MHz, 0 if NVML cannot say. */
static unsigned sm_clock(int d)
{
    __typeof__(&nvmlDeviceGetClockInfo) info = LB_REAL(nvmlDeviceGetClockInfo);
    nvmlDevice_t h;
    unsigned mhz = 0;
    if (!info || nvml_device(d, &h) || info(h, NVML_CLOCK_SM, &mhz) != NVML_SUCCESS)
        return 0;
    return mhz;
}

static int shared_now(int d);

/* 1 if NVML lists one of pids (n of them) as running on device h. */
static int pids_listed(nvmlDevice_t h, const unsigned int *pids, int n)
{
    static nvmlProcessInfo_t infos[MAX_SAMPLES]; /* watcher thread only */
    __typeof__(&nvmlDeviceGetComputeRunningProcesses_v3) procs = LB_REAL(nvmlDeviceGetComputeRunningProcesses_v3);
    unsigned int m = MAX_SAMPLES;
    if (!procs || procs(h, &m, infos) != NVML_SUCCESS)
        return 0;
    for (unsigned i = 0; i < m && i < MAX_SAMPLES; i++)
        for (int k = 0; k < n; k++)
            if (infos[i].pid == pids[k])
                return 1;
    return 0;
}

/* The container's utilisation of device d in percent over the last second; -1 if unknown
 * (may_hold: in the first seconds of an episode, no sample of ours may be no reading). */
static int container_util(int d, uint64_t launched_in_window, int may_hold)
{
    static nvmlProcessUtilizationSample_t samples[MAX_SAMPLES]; /* watcher thread only */
    static unsigned int pids[LB_REGION_MAX_SLOTS];
    __typeof__(&nvmlDeviceGetProcessUtilization) per_proc = LB_REAL(nvmlDeviceGetProcessUtilization);
    nvmlDevice_t h;
    if (nvml_device(d, &h))
        return -1;
    int found = 0;
    unsigned sum = 0;
    if (per_proc) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long long since = ((unsigned long long)ts.tv_sec - 1) * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000;
        unsigned int n = MAX_SAMPLES;
        nvmlReturn_t r = per_proc(h, samples, &n, since);
        if (r == NVML_SUCCESS || r == NVML_ERROR_NOT_FOUND) {
            int np = container_pids(pids, LB_REGION_MAX_SLOTS);
            for (unsigned i = 0; r == NVML_SUCCESS && i < n && i < MAX_SAMPLES; i++)
                for (int k = 0; k < np; k++)
                    if (samples[i].pid == pids[k]) {
                        sum += samples[i].smUtil;
                        found = 1;
                        break;
                    }
            if (found || launched_in_window == 0)
                return sum > 100 ? 100 : (int)sum;
            /* Work was launched but no sample is ours. In an episode's first seconds, with the
             * device saturated and a neighbour of ours listed by NVML, our launches wait behind
             * the neighbour's queue: no reading (the rate is kept). Otherwise the whole device
             * stands for it (alone, it is ours; below saturation ours shows soon). The readings
             * an H200 gives and why the other choices failed: docs/benchmarks.md, "The fallback
             * controller's lab notes". */
            int all = util_of(h);
            if (may_hold && all >= 95 && shared_now(d) && pids_listed(h, pids, np))
                return -1;
            return all;
        }
    }
    /* The pids cannot be matched (a PID namespace without host pids): the whole device, never
     * over the limit, at worst under it when other tenants are busy. */
    return util_of(h);
}

/* `default` with the node monitor's switch off: not limited now. */
static int switched_off(void)
{
    return lb_cfg.policy == LB_POLICY_DEFAULT && !atomic_load_explicit(&lb_region->util_switch, memory_order_relaxed);
}

static int64_t realtime_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec;
}

/* 1 if a process of another container has a context on device d (or NVML cannot say): more
 * processes on the device than the container has. Counted, not matched, because a container's
 * pids are often not the ones NVML reports. */
static int shared_now(int d)
{
    __typeof__(&nvmlInit_v2) init = LB_REAL(nvmlInit_v2);
    __typeof__(&nvmlDeviceGetComputeRunningProcesses_v3) procs = LB_REAL(nvmlDeviceGetComputeRunningProcesses_v3);
    nvmlDevice_t h;
    if (!init || !procs || init() != NVML_SUCCESS || nvml_device(d, &h))
        return 1;
    unsigned int n = 0;
    nvmlReturn_t r = procs(h, &n, NULL);
    if (r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT_SIZE)
        return 1;
    unsigned int pids[LB_REGION_MAX_SLOTS];
    return n > (unsigned)container_pids(pids, LB_REGION_MAX_SLOTS);
}

const struct lb_sensors lb_nvml_sensors = {
    .container_util = container_util,
    .device_util = device_util,
    .sm_clock = sm_clock,
    .shared_now = shared_now,
    .now_ns = now_ns,
    .realtime_s = realtime_s,
    .switched_off = switched_off,
};
