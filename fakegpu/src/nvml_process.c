/*
 * Processes on a device, read from the shared state: every live process that holds a context or
 * memory there, with its bytes (allocations + contexts) and, in MIG mode, its GPU/compute
 * instance. PIDs are as the *caller's* PID namespace sees them (fg_state_slot_pid: the kernel's
 * translation of a lock holder's PID): a node agent in the host's namespace gets host PIDs, as
 * from a real driver; a process in a container gets its container's PIDs for its own processes
 * (a real driver would give host PIDs there too) and, for others it cannot see, the PID their
 * owner recorded.
 */
#include <string.h>
#include <time.h>

#include "nvml_internal.h"

#define HANDLE(h, d)                                                                                                   \
    const fg_nvdev *d = fg_nv_handle(h);                                                                               \
    if (!d)                                                                                                            \
    return NVML_ERROR_INVALID_ARGUMENT

#define MAX_ROWS 256

typedef struct row {
    unsigned pid;
    unsigned long long used;
    unsigned gi, ci;
} row;

/* The units a handle covers: itself, or every instance of a GPU in MIG mode. */
static unsigned units_of(const fg_nvdev *d, unsigned units[FG_MAX_MIG], int migs[FG_MAX_MIG]) {
    const fg_device *dv = fg_nv_device(d);
    if (d->mig >= 0)
        return units[0] = dv->mig[d->mig].unit, migs[0] = d->mig, 1;
    if (!dv->mig_enabled)
        return units[0] = dv->unit, migs[0] = -1, 1;
    for (unsigned m = 0; m < dv->nmig; m++)
        units[m] = dv->mig[m].unit, migs[m] = (int)m;
    return dv->nmig;
}

static nvmlReturn_t collect(const fg_nvdev *d, row *rows, unsigned *n) {
    unsigned units[FG_MAX_MIG];
    int migs[FG_MAX_MIG];
    unsigned nu = units_of(d, units, migs);
    const fg_device *dv = fg_nv_device(d);
    *n = 0;
    if (fg_state_lock(&fg_nv.st) != 0) /* also reclaims dead processes */
        return NVML_ERROR_UNKNOWN;
    for (int s = 0; s < FG_MAX_SLOTS; s++) {
        const fg_slot *sl = &fg_nv.st.sh->slot[s];
        for (unsigned u = 0; sl->in_use && u < nu && *n < MAX_ROWS; u++) {
            uint64_t b = sl->used[units[u]] + sl->ctx[units[u]];
            if (!b)
                continue;
            row *r = &rows[(*n)++];
            r->pid = (unsigned)fg_state_slot_pid(&fg_nv.st, s), r->used = b;
            r->gi = migs[u] < 0 ? 0xFFFFFFFFu : dv->mig[migs[u]].gpu_instance_id;
            r->ci = migs[u] < 0 ? 0xFFFFFFFFu : dv->mig[migs[u]].compute_instance_id;
        }
    }
    fg_state_unlock(&fg_nv.st);
    return NVML_SUCCESS;
}

/* FAKEGPU_NVML_STALE_MS: a process that ended stays in this library's process list for that long,
 * with what it held last, as a real driver lists a process while it tears its context down, or as
 * long as a descriptor of it lives on in another process (the node monitor must not take such a
 * record for the memory of whichever process takes the PID next). Each reader remembers the rows
 * it listed: the record outlives the process in the lists of a reader that saw it alive. */
#define MAX_STALE 256
static struct stale_row {
    const fg_nvdev *d;
    row r;
    uint64_t seen_ns;
} stale[MAX_STALE];
static unsigned nstale, stale_inits; /* the rows, and the first init they were listed after */
static pthread_mutex_t stale_mu = PTHREAD_MUTEX_INITIALIZER;

/* Remembers d's live rows and appends those of its processes that ended within the stale time. */
static void add_stale(const fg_nvdev *d, row *rows, unsigned *n) {
    uint64_t keep = fg_nv.cfg.stale_ns, now = fg_now_ns();
    if (!keep)
        return;
    pthread_mutex_lock(&stale_mu);
    if (stale_inits != fg_nv.inits) /* listed before the library was set up again: forgotten */
        nstale = 0, stale_inits = fg_nv.inits;
    unsigned live = *n, kept = 0;
    for (unsigned i = 0; i < nstale; i++) {
        struct stale_row *s = &stale[i];
        int listed = 0;
        for (unsigned j = 0; s->d == d && j < live; j++)
            listed |= rows[j].pid == s->r.pid;
        if (listed || now - s->seen_ns >= keep)
            continue; /* listed again below, or stale for long enough */
        if (s->d == d && *n < MAX_ROWS)
            rows[(*n)++] = s->r;
        stale[kept++] = *s;
    }
    for (unsigned j = 0; j < live && kept < MAX_STALE; j++)
        stale[kept++] = (struct stale_row){d, rows[j], now};
    nstale = kept;
    pthread_mutex_unlock(&stale_mu);
}

/* The real library's contract: *infoCount in = room, out = how many there are;
 * NVML_ERROR_INSUFFICIENT_SIZE when the room is too small (infos may be NULL to ask). */
static nvmlReturn_t processes(nvmlDevice_t device, unsigned int *infoCount, void *infos, int version) {
    HANDLE(device, d);
    nvmlReturn_t r = fg_nv_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!infoCount || (!infos && *infoCount))
        return NVML_ERROR_INVALID_ARGUMENT;
    row rows[MAX_ROWS];
    unsigned n;
    if ((r = collect(d, rows, &n)) != NVML_SUCCESS)
        return r;
    add_stale(d, rows, &n);
    unsigned room = *infoCount;
    *infoCount = n;
    if (room < n)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned i = 0; i < n; i++) {
        if (version == 1) {
            nvmlProcessInfo_v1_t *p = &((nvmlProcessInfo_v1_t *)infos)[i];
            p->pid = rows[i].pid, p->usedGpuMemory = rows[i].used;
        } else { /* v2 and v3 share a layout */
            nvmlProcessInfo_t *p = &((nvmlProcessInfo_t *)infos)[i];
            p->pid = rows[i].pid, p->usedGpuMemory = rows[i].used;
            p->gpuInstanceId = rows[i].gi, p->computeInstanceId = rows[i].ci;
        }
    }
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                               nvmlProcessInfo_t *infos) {
    NV_ENTER();
    return processes(device, infoCount, infos, 3);
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                               nvmlProcessInfo_v2_t *infos);
FG_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                               nvmlProcessInfo_v2_t *infos) {
    NV_ENTER();
    return processes(device, infoCount, infos, 2);
}

FG_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                            nvmlProcessInfo_v1_t *infos);
FG_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                            nvmlProcessInfo_v1_t *infos) {
    NV_ENTER();
    return processes(device, infoCount, infos, 1);
}

/* FAKEGPU_NVML_SAMPLES=periodic: what an H200 (driver 580) gave, read every 0.5 s while two
 * processes shared it (docs/benchmarks.md): one sample per process per window, ending at a time
 * of its own (staggered by pid), none before the process has been busy a whole window, and under
 * time-slicing — another process busy in the same window — in steps of 20 %. The sample is the
 * last window that ended by `now`. 0: a sample, -1: none. Under the state lock. */
static int periodic_sample(const fg_unit *u, unsigned unit, int32_t pid, uint64_t now, uint64_t window, uint64_t *end,
                           unsigned *v)
{
    uint64_t phase = ((uint64_t)(uint32_t)pid * 2654435761ULL) % window, first = UINT64_MAX;
    if (now < phase + window)
        return -1;
    *end = now - (now - phase) % window;
    for (uint32_t i = 0; i < u->count; i++)
        if (u->ring[i].pid == pid && u->ring[i].start < first)
            first = u->ring[i].start;
    if (first == UINT64_MAX || first + window > *end)
        return -1; /* not busy for a whole window yet (as far as the ring remembers) */
    unsigned own = fg_state_util(&fg_nv.st, unit, pid, *end, window);
    unsigned all = fg_state_util(&fg_nv.st, unit, 0, *end, window);
    if (all > own) /* time-sliced with another process */
        own = (own + 10) / 20 * 20;
    *v = own > 100 ? 100 : own;
    return 0;
}

/* The PID the caller's namespace sees for the owner of busy interval b, as the process list names
 * it (fg_state_slot_pid); -1 when the owner is gone: no PID the caller could name stands for it
 * any more (a reader in another namespace would take the PID the owner called itself for one of
 * its own). Under the state lock. */
static int32_t shown_pid(const fg_busy *b) {
    if (b->slot1 == 0 || b->slot1 > FG_MAX_SLOTS)
        return -1;
    int s = (int)b->slot1 - 1;
    const fg_slot *sl = &fg_nv.st.sh->slot[s];
    if (!sl->in_use || sl->pid != b->pid)
        return -1;
    return fg_state_slot_pid(&fg_nv.st, s);
}

/* One sample per live process that kept the engine busy during the window: smUtil is its share of
 * the window in percent (none when that rounds to 0), by the PID the caller sees. Not supported in
 * MIG mode, as on a real GPU. */
FG_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                                       unsigned int *processSamplesCount,
                                                       unsigned long long lastSeenTimeStamp) {
    NV_ENTER();
    HANDLE(device, d);
    nvmlReturn_t r = fg_nv_alive(d);
    if (r != NVML_SUCCESS)
        return r;
    if (!processSamplesCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    const fg_device *dv = fg_nv_device(d);
    if (d->mig >= 0 || dv->mig_enabled)
        return NVML_ERROR_NOT_SUPPORTED;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long stamp = (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000;
    int32_t pids[MAX_ROWS], shown[MAX_ROWS];
    unsigned util[MAX_ROWS], n = 0;
    if (fg_state_lock(&fg_nv.st) != 0)
        return NVML_ERROR_UNKNOWN;
    uint64_t now = fg_now_ns(), window = fg_nv.cfg.util_window_ns;
    const fg_unit *u = &fg_nv.st.sh->unit[dv->unit];
    int periodic = fg_nv.cfg.periodic_samples;
    unsigned long long stamps[MAX_ROWS];
    for (uint32_t i = 0; i < u->count && n < MAX_ROWS; i++) {
        const fg_busy *b = &u->ring[i];
        if (b->end + (periodic ? 2 * window : window) <= now || b->start >= now)
            continue;
        unsigned k = 0;
        while (k < n && pids[k] != b->pid) k++;
        if (k < n)
            continue;
        int32_t as = shown_pid(b);
        if (as < 0)
            continue;
        if (!periodic) {
            pids[n] = b->pid, shown[n] = as, stamps[n] = stamp;
            util[n++] = fg_state_util(&fg_nv.st, dv->unit, b->pid, now, window);
            continue;
        }
        uint64_t end;
        unsigned v;
        if (periodic_sample(u, dv->unit, b->pid, now, window, &end, &v) == 0)
            pids[n] = b->pid, shown[n] = as, util[n] = v, stamps[n++] = stamp - (now - end) / 1000;
    }
    fg_state_unlock(&fg_nv.st);
    /* A process whose share rounds to 0 % gets no sample: an H200 lists no sample for a process
     * that barely ran beside a busy one (a limiter must not take that for "pids not matched").
     * Nor does a sample at or before lastSeenTimeStamp. */
    unsigned kept = 0;
    for (unsigned i = 0; i < n; i++)
        if (util[i] > 0 && stamps[i] > lastSeenTimeStamp)
            shown[kept] = shown[i], util[kept] = util[i], stamps[kept++] = stamps[i];
    n = kept;
    if (n == 0)
        return NVML_ERROR_NOT_FOUND;
    unsigned room = *processSamplesCount;
    *processSamplesCount = n;
    if (!utilization || room < n)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned i = 0; i < n; i++)
        utilization[i] = (nvmlProcessUtilizationSample_t){(unsigned)shown[i], stamps[i], util[i], 0, 0, 0};
    return NVML_SUCCESS;
}
