/*
 * Kernel launches. No code runs: a launch queues the kernel's simulated duration (cuda_kernels.c:
 * profile launch_ns + block_ns per thread block, or FAKEGPU_LAUNCH_NS, or the spin kernel's own)
 * on this process's queue of the device, and the device's engine runs the queues of all
 * processes time-sliced (timeline.c), so NVML utilisation rises with load and a synchronisation
 * waits until the queue has run. Like a real GPU's bounded launch queue, a launch blocks the
 * caller while its queue is full (FG_CHAN_DEPTH kernels, or FG_QUEUE_NS of work).
 *
 * FAKEGPU_POWER_BOOST=B (percent) models a power-capped GPU: a dense GEMM on an H200 runs at
 * ~1500 MHz when the card is fully loaded (700 W) and at 1980 MHz when it is busy a third of the
 * time, so a share of its time buys more work than the same share of a full-load run. A kernel
 * submitted while the device was busy for a fraction L of the last FG_POWER_WINDOW_NS runs
 * min(B/100, 1/L) times faster than its nominal duration: at full load nominal, lightly loaded
 * B/100 faster, and never more work per second than at full load (the cap). NVML's SM clock
 * follows the same factor (nvml_device.c).
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "cuda_internal.h"

/* The duration of dur ns of nominal work submitted now (lock held): see FAKEGPU_POWER_BOOST. */
static uint64_t powered_ns(unsigned unit, uint64_t dur, uint64_t now) {
    uint64_t speed = fg_state_speed(&fg_cu.st, unit, now, fg_cu.cfg.power_boost);
    /* The clock shows the whole gain; the work, power_work percent of it: a card whose kernels are
     * partly memory- or latency-bound gains less from a higher clock than the clock says. */
    speed = 100 + (speed - 100) * fg_cu.cfg.power_work / 100;
    return dur > UINT64_MAX / 100 ? dur / speed * 100 : dur * 100 / speed;
}

static void sleep_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* Any non-NULL function handle is accepted (nothing is executed), so tests of launch limiters can
 * pass a dummy one without loading a module. Graph launches run their kernel nodes through it. */
CUresult fg_launch(CUfunction f, uint64_t blocks, uint64_t dur) {
    fg_ctx *c;
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!f || blocks == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = fg_cu_need_ctx(&c)) != CUDA_SUCCESS)
        return r;
    unsigned unit = fg_cu.dev[c->dev].unit;
    for (;;) {
        if (fg_state_lock(&fg_cu.st) != 0)
            return CUDA_ERROR_UNKNOWN;
        /* The bound is per queue, like a real GPU's per-channel launch queue: one process filling
         * its queue does not keep another's launches out. */
        int64_t wait = fg_state_submit(&fg_cu.st, unit, powered_ns(unit, dur, fg_state_now(&fg_cu.st, unit)), dur);
        if (wait == 0)
            fg_event_submitted(unit);
        fg_state_unlock(&fg_cu.st);
        if (wait < 0) {
            static int said;
            if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
                fg_log("launch refused: no work queue left on the GPU for this process (%d queues and %d processes "
                       "at most per host)", FG_MAX_CHANNELS, FG_MAX_SLOTS);
            return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
        }
        if (wait == 0)
            return CUDA_SUCCESS;
        sleep_ns((uint64_t)wait); /* queue full: wait outside the lock */
    }
}

CUresult fg_launch_drain(const fg_ctx *c) {
    unsigned unit = fg_cu.dev[c->dev].unit;
    for (;;) {
        if (fg_state_lock(&fg_cu.st) != 0)
            return CUDA_ERROR_UNKNOWN;
        uint64_t at = fg_state_drain_at(&fg_cu.st, unit);
        fg_state_unlock(&fg_cu.st);
        if (!at)
            return CUDA_SUCCESS;
        /* The earliest the queue can have run; other queues may make it later: then again. A
         * neighbour that dies drops its work and makes it sooner: look again within 100 ms. */
        uint64_t soon = fg_now_ns() + 100000000ULL;
        at = at < soon ? at : soon;
        struct timespec ts = {(time_t)(at / 1000000000ULL), (long)(at % 1000000000ULL)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
    }
}

CUresult fg_launch_query(const fg_ctx *c) {
    if (fg_state_lock(&fg_cu.st) != 0)
        return CUDA_ERROR_UNKNOWN;
    uint64_t at = fg_state_drain_at(&fg_cu.st, fg_cu.dev[c->dev].unit);
    fg_state_unlock(&fg_cu.st);
    return at ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

FG_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                  unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                  unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra) {
    (void)sharedMemBytes, (void)extra;
    if (!blockDimX || !blockDimY || !blockDimZ || (uint64_t)blockDimX * blockDimY * blockDimZ > 1024)
        return fg_cu_ready() ? fg_cu_ready() : CUDA_ERROR_INVALID_VALUE;
    CUresult r;
    uint64_t blocks = (uint64_t)gridDimX * gridDimY * gridDimZ;
    if (fg_cu_ready() != CUDA_SUCCESS || !f || !blocks)
        return fg_launch(f, blocks, 0); /* its error */
    uint64_t ns = fg_cu_kernel_ns_here(f, blocks, kernelParams);
    if (fg_capture_kernel(hStream, f, blocks, ns, &r))
        return r; /* a capturing stream records the launch as a kernel node */
    return fg_launch(f, blocks, ns);
}

FG_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                       unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                       unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                       void **kernelParams, void **extra) {
    return cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                          kernelParams, extra);
}

FG_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra) {
    if (!config)
        return fg_cu_ready() ? fg_cu_ready() : CUDA_ERROR_INVALID_VALUE;
    return cuLaunchKernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                          config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream, kernelParams,
                          extra);
}

FG_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                         void **extra) {
    return cuLaunchKernelEx(config, f, kernelParams, extra);
}

FG_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                             void **kernelParams) {
    return cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                          kernelParams, NULL);
}

FG_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                  unsigned int gridDimZ, unsigned int blockDimX,
                                                  unsigned int blockDimY, unsigned int blockDimZ,
                                                  unsigned int sharedMemBytes, CUstream hStream, void **kernelParams) {
    return cuLaunchCooperativeKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                                     hStream, kernelParams);
}

/* Every launch of the list runs on the current context's device: fakegpu has no per-stream
 * device (streams are not simulated), which is what a single-device list means anyway. */
FG_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList, unsigned int numDevices,
                                                        unsigned int flags) {
    (void)flags;
    if (!launchParamsList || !numDevices)
        return fg_cu_ready() ? fg_cu_ready() : CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < numDevices; i++) {
        const CUDA_LAUNCH_PARAMS *p = &launchParamsList[i];
        CUresult r = cuLaunchKernel(p->function, p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY,
                                    p->blockDimZ, p->sharedMemBytes, p->hStream, p->kernelParams, NULL);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* The legacy API: fakegpu keeps no per-function block shape (nothing executes), so the shape is
 * only checked; cuLaunch is a 1x1 grid. Parameters set through cuParamSet* do not exist here,
 * so a legacy launch always runs for the profile's duration. */
FG_EXPORT CUresult cuFuncSetBlockShape(CUfunction hfunc, int x, int y, int z) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!hfunc || x <= 0 || y <= 0 || z <= 0 || (uint64_t)x * (uint64_t)y * (uint64_t)z > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream) {
    (void)hStream;
    if (grid_width <= 0 || grid_height <= 0)
        return fg_cu_ready() ? fg_cu_ready() : CUDA_ERROR_INVALID_VALUE;
    uint64_t blocks = (uint64_t)grid_width * (uint64_t)grid_height;
    return fg_launch(f, blocks, fg_cu_ready() ? 0 : fg_cu_kernel_ns_here(f, blocks, NULL));
}

FG_EXPORT CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height) {
    return cuLaunchGridAsync(f, grid_width, grid_height, NULL);
}

FG_EXPORT CUresult cuLaunch(CUfunction f) { return cuLaunchGridAsync(f, 1, 1, NULL); }
