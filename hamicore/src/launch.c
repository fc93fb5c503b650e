/* Kernel launches. Without a compute limit in force (lb_launch_limited == 0: no device limited,
 * or policy "disable") the wrappers are the init check, one flag and a tail call. Otherwise the
 * launch first waits for its device's token bucket (limiter.c), then calls the driver with the
 * reentrancy guard up, so a driver whose _ptsz/Ex entry points call the plain one through its
 * export is not charged twice. */
#include "context.h"
#include "init.h"
#include "limiter.h"
#include "symbols.h"

static inline uint64_t grid_blocks(unsigned int gx, unsigned int gy, unsigned int gz)
{
    uint64_t b = (uint64_t)gx * gy; /* < 2^64: two 32-bit factors */
    if (__builtin_mul_overflow(b, (uint64_t)gz, &b))
        b = UINT64_MAX;
    return b ? b : 1; /* an invalid empty grid: the driver refuses it; costs one block here */
}

/* 1 if the caller must call the driver guarded (it was charged). */
static int __attribute__((noinline)) throttle(uint64_t blocks)
{
    int dev;
    if (lb_guard || lb_cur_device(&dev) != 0)
        return 0; /* re-entered from the driver, or no context (the driver refuses the launch) */
    lb_limiter_take(dev, blocks);
    return 1;
}

#define LAUNCH(w, dims, call)                                                                                       \
    __typeof__(&w) real = LB_REAL(w);                                                                               \
    if (!real)                                                                                                      \
        return CUDA_ERROR_NOT_FOUND;                                                                                \
    if (__builtin_expect(!lb_active() || !lb_launch_limited, 1) || !throttle(dims))                                 \
        return call;                                                                                                \
    lb_guard_enter();                                                                                               \
    CUresult r = call;                                                                                              \
    lb_guard_leave();                                                                                               \
    return r

LB_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                  unsigned int by, unsigned int bz, unsigned int shm, CUstream s, void **params,
                                  void **extra)
{
    LAUNCH(cuLaunchKernel, grid_blocks(gx, gy, gz), real(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));
}

LB_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                       unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
                                       CUstream s, void **params, void **extra)
{
    LAUNCH(cuLaunchKernel_ptsz, grid_blocks(gx, gy, gz), real(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));
}

LB_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    LAUNCH(cuLaunchKernelEx, config ? grid_blocks(config->gridDimX, config->gridDimY, config->gridDimZ) : 1,
           real(config, f, params, extra));
}

LB_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    LAUNCH(cuLaunchKernelEx_ptsz, config ? grid_blocks(config->gridDimX, config->gridDimY, config->gridDimZ) : 1,
           real(config, f, params, extra));
}
