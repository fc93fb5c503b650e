/*
 * launchprobe: launch (empty, fakegpu-simulated) kernels back to back for a while and report how
 * much of the wall time the device was busy with them. The compute-limit tests and benchmarks.
 *
 *   --seconds S    launch for S seconds, then wait for the queued work (cuCtxSynchronize)
 *   --blocks B     grid blocks per launch (default 1)
 *   --ex           cuLaunchKernelEx instead of cuLaunchKernel
 *   --ptsz         fetch the per-thread-default-stream variant through cuGetProcAddress
 *
 * busy_fraction = launches x FAKEGPU_LAUNCH_NS / (time from the first launch until the queue is
 * drained): what the device spent on this process over the run. One JSON line.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "limitbed/cuda_abi.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    double seconds = 3;
    unsigned blocks = 1;
    int ex = 0, ptsz = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--blocks") && i + 1 < argc)
            blocks = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ex"))
            ex = 1;
        else if (!strcmp(argv[i], "--ptsz"))
            ptsz = 1;
        else {
            fprintf(stderr, "usage: launchprobe [--seconds S] [--blocks B] [--ex] [--ptsz]\n");
            return 2;
        }
    }
    const char *ns = getenv("FAKEGPU_LAUNCH_NS");
    double launch_ns = ns ? atof(ns) : 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("{\"error\":\"dlopen\"}\n");
        return 1;
    }
    __typeof__(&cuGetProcAddress_v2) gpa = (__typeof__(gpa))dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        printf("{\"error\":\"no cuGetProcAddress_v2\"}\n");
        return 1;
    }
    cuuint64_t fl = ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    CUdriverProcAddressQueryResult q;
    __typeof__(&cuInit) init;
    __typeof__(&cuDeviceGet) dget;
    __typeof__(&cuDevicePrimaryCtxRetain) retain;
    __typeof__(&cuCtxSetCurrent) setcur;
    __typeof__(&cuCtxSynchronize) sync;
    __typeof__(&cuLaunchKernel) launch;
    __typeof__(&cuLaunchKernelEx) launch_ex;
    gpa("cuInit", (void **)&init, 12000, fl, &q);
    gpa("cuDeviceGet", (void **)&dget, 12000, fl, &q);
    gpa("cuDevicePrimaryCtxRetain", (void **)&retain, 12000, fl, &q);
    gpa("cuCtxSetCurrent", (void **)&setcur, 12000, fl, &q);
    gpa("cuCtxSynchronize", (void **)&sync, 12000, fl, &q);
    gpa("cuLaunchKernel", (void **)&launch, 12000, fl, &q);
    gpa("cuLaunchKernelEx", (void **)&launch_ex, 12000, fl, &q);
    CUdevice d;
    CUcontext ctx;
    CUresult r;
    if ((r = init(0)) || (r = dget(&d, 0)) || (r = retain(&ctx, d)) || (r = setcur(ctx))) {
        printf("{\"error\":\"init %d\"}\n", (int)r);
        return 1;
    }
    static int dummy; /* fakegpu accepts any non-NULL function handle */
    CUfunction fn = (CUfunction)(void *)&dummy;
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = blocks, cfg.gridDimY = 1, cfg.gridDimZ = 1;
    cfg.blockDimX = 1, cfg.blockDimY = 1, cfg.blockDimZ = 1;
    unsigned long long n = 0;
    double t0 = now_s(), end = t0 + seconds;
    r = CUDA_SUCCESS;
    while (r == CUDA_SUCCESS && now_s() < end) {
        r = ex ? launch_ex(&cfg, fn, NULL, NULL) : launch(fn, blocks, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        n += r == CUDA_SUCCESS;
    }
    CUresult sr = sync();
    double elapsed = now_s() - t0;
    printf("{\"launches\":%llu,\"launch_error\":%d,\"sync_error\":%d,\"elapsed_s\":%.3f,\"busy_s\":%.3f,"
           "\"busy_fraction\":%.4f}\n",
           n, (int)r, (int)sr, elapsed, (double)n * launch_ns / 1e9, (double)n * launch_ns / 1e9 / elapsed);
    return r == CUDA_SUCCESS && sr == CUDA_SUCCESS ? 0 : 1;
}
