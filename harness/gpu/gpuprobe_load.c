/* gpuprobe's load and its observers: spin kernels at a duty cycle, the SM clock beside them, and
 * NVML's per-process samples of processes sharing the GPU (gpuprobe.h). */
#include <stdlib.h>
#include <string.h>

#include "gpuprobe.h"

int gp_load(const gp_opts *o) {
    CUdevice dev;
    CUfunction f;
    int rc = gp_context(&dev);
    if (rc || (rc = gp_spin_function(&f, "fakegpu_spin")))
        return rc;
    int sms = 1;
    cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    unsigned long long ns = (unsigned long long)o->kernel_us * 1000ULL;
    void *params[] = {&ns};
    /* A kernel of kernel_us on every SM, then (below full duty) a pause that makes it duty of
     * each period: the pause is the kernel's measured time times (1 - duty) / duty. */
    double t0 = gp_now(), end = t0 + o->seconds;
    unsigned long kernels = 0;
    while (gp_now() < end) {
        double k0 = gp_now();
        CUresult r = cuLaunchKernel(f, (unsigned)sms, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
        if (r != CUDA_SUCCESS)
            return gp_fail("cuLaunchKernel", gp_cu_err(r));
        kernels++;
        if (o->duty < 1) {
            cuCtxSynchronize();
            gp_sleep((gp_now() - k0) * (1 - o->duty) / o->duty);
        } else if (kernels % 8 == 0) {
            cuCtxSynchronize();
        }
    }
    cuCtxSynchronize();
    printf("{\"kernels\":%lu,\"seconds\":%.2f,\"duty\":%.2f,\"kernel_us\":%u}\n", kernels, gp_now() - t0, o->duty, o->kernel_us);
    return 0;
}

static int device(nvmlDevice_t *d) {
    nvmlReturn_t n = nvmlInit_v2();
    if (n == NVML_SUCCESS)
        n = nvmlDeviceGetHandleByIndex_v2(0, d);
    return n == NVML_SUCCESS ? 0 : gp_fail("nvmlInit_v2", nvmlErrorString(n));
}

static int cmp_uint(const void *a, const void *b) {
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

int gp_clocks(const gp_opts *o) {
    nvmlDevice_t d;
    int rc = device(&d);
    if (rc)
        return rc;
    unsigned cap = (unsigned)(o->seconds * 1000 / o->every_ms) + 2, n = 0, *mhz = calloc(cap, sizeof *mhz);
    double util = 0;
    if (!mhz)
        return gp_fail("calloc", "out of memory");
    double t0 = gp_now();
    while (gp_now() - t0 < o->seconds && n < cap) {
        gp_sleep(o->every_ms / 1000.0);
        if (gp_now() - t0 < o->skip)
            continue;
        unsigned c = 0;
        nvmlUtilization_t u = {0};
        if (nvmlDeviceGetClockInfo(d, NVML_CLOCK_SM, &c) != NVML_SUCCESS)
            continue;
        nvmlDeviceGetUtilizationRates(d, &u);
        mhz[n++] = c;
        util += u.gpu;
    }
    if (n == 0)
        return gp_fail("nvmlDeviceGetClockInfo", "no sample");
    qsort(mhz, n, sizeof *mhz, cmp_uint);
    printf("{\"sm_mhz\":%u,\"sm_mhz_min\":%u,\"sm_mhz_max\":%u,\"util\":%.1f,\"samples\":%u}\n", mhz[n / 2], mhz[0], mhz[n - 1],
           util / n, n);
    free(mhz);
    nvmlShutdown();
    return 0;
}

#define MAXP 16 /* processes followed */

typedef struct {
    unsigned pid, samples, window_hits;
    unsigned long long last_ts;
    double sm;
} proc_seen;

static proc_seen *find(proc_seen *p, unsigned *np, unsigned pid) {
    for (unsigned i = 0; i < *np; i++)
        if (p[i].pid == pid)
            return &p[i];
    if (*np == MAXP)
        return NULL;
    p[*np] = (proc_seen){.pid = pid};
    return &p[(*np)++];
}

#define MAXS 2048

/* One poll: every new sample (a pid's timestamp not seen before) counted; *in_window gets a bit
 * per process sampled in the current window. The driver is asked for the samples of the last 5 s
 * before the newest seen (µs): processes' samples come at times of their own, not in order. */
static void poll_samples(nvmlDevice_t d, proc_seen *p, unsigned *np, unsigned long long *newest, unsigned *in_window) {
    static nvmlProcessUtilizationSample_t s[MAXS];
    unsigned count = MAXS;
    unsigned long long since = *newest > 5000000ULL ? *newest - 5000000ULL : 0;
    if (nvmlDeviceGetProcessUtilization(d, s, &count, since) != NVML_SUCCESS)
        return;
    for (unsigned i = 0; i < count && i < MAXS; i++) {
        proc_seen *q = find(p, np, s[i].pid);
        if (!q || s[i].timeStamp <= q->last_ts)
            continue;
        q->last_ts = s[i].timeStamp;
        q->samples++;
        q->sm += s[i].smUtil;
        *in_window |= 1u << (q - p);
        if (s[i].timeStamp > *newest)
            *newest = s[i].timeStamp;
    }
}

int gp_samples(const gp_opts *o) {
    nvmlDevice_t d;
    int rc = device(&d);
    if (rc)
        return rc;
    proc_seen p[MAXP];
    unsigned np = 0, windows = 0, shared = 0, in_window = 0;
    unsigned long long newest = 0;
    double t0 = gp_now(), wstart = t0;
    while (gp_now() - t0 < o->seconds) {
        gp_sleep(o->every_ms / 1000.0);
        poll_samples(d, p, &np, &newest, &in_window);
        /* A window is 1 s; the last one counts from half a second on. */
        double w = gp_now() - wstart;
        if (w >= 1.0 || (gp_now() - t0 >= o->seconds && w >= 0.5)) {
            unsigned bits = 0;
            for (unsigned i = 0; i < np; i++)
                bits += (in_window >> i) & 1u;
            windows++;
            shared += bits > 1;
            in_window = 0;
            wstart = gp_now();
        }
    }
    double took = gp_now() - t0;
    printf("{\"seconds\":%.2f,\"windows\":%u,\"windows_shared\":%u,\"processes\":[", took, windows, shared);
    for (unsigned i = 0; i < np; i++)
        printf("%s{\"pid\":%u,\"samples\":%u,\"period_ms\":%.1f,\"sm_mean\":%.1f}", i ? "," : "", p[i].pid, p[i].samples,
               p[i].samples ? took * 1000 / p[i].samples : 0, p[i].samples ? p[i].sm / p[i].samples : 0);
    printf("]}\n");
    nvmlShutdown();
    return 0;
}
