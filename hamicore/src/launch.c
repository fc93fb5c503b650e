/* Kernel launches: every entry point that starts device work (cuLaunchKernel, cuLaunchKernelEx,
 * their _ptsz variants, the cooperative launches and the legacy cuLaunch/cuLaunchGrid[Async]).
 *
 * Each one first marks the container as having launched recently (one relaxed load of a shared
 * word; the store happens once per monitor period): the node monitor needs that from every
 * container, limited or not, to decide the `default` policy. Without a compute limit in force
 * (lb_launch_limited == 0: no device limited, or policy "disable") the wrapper is then one flag
 * and a tail call. Otherwise the launch first waits for its device's budget (limiter.c), then
 * calls the driver with the reentrancy guard up, so a driver whose _ptsz/Ex entry points call the
 * plain one through its export is not charged twice. */
#include "context.h"
#include "init.h"
#include "limiter.h"
#include "region.h"
#include "symbols.h"

static inline uint64_t grid_blocks(unsigned int gx, unsigned int gy, unsigned int gz)
{
    uint64_t b = (uint64_t)gx * gy; /* < 2^64: two 32-bit factors */
    if (__builtin_mul_overflow(b, (uint64_t)gz, &b))
        b = UINT64_MAX;
    return b ? b : 1; /* an invalid empty grid: the driver refuses it; costs one block here */
}

static inline uint64_t legacy_blocks(int w, int h)
{
    return w > 0 && h > 0 ? (uint64_t)w * (uint64_t)h : 1;
}

/* 1 if the caller must call the driver guarded (it was charged). */
static int __attribute__((noinline)) throttle(uint64_t kernels, uint64_t blocks)
{
    int dev;
    if (lb_guard || lb_cur_device(&dev) != 0)
        return 0; /* re-entered from the driver, or no context (the driver refuses the launch) */
    lb_limiter_take(dev, kernels, blocks);
    return 1;
}

#define LAUNCH_N(w, kernels, blocks, call)                                                                          \
    __typeof__(&w) real = LB_REAL(w);                                                                               \
    if (!real)                                                                                                      \
        return CUDA_ERROR_NOT_FOUND;                                                                                \
    if (__builtin_expect(!lb_active(), 0))                                                                          \
        return call;                                                                                                \
    lb_mark_launch();                                                                                               \
    if (__builtin_expect(!lb_launch_limited, 1) || !throttle(kernels, blocks))                                      \
        return call;                                                                                                \
    lb_guard_enter();                                                                                               \
    CUresult r = call;                                                                                              \
    lb_guard_leave();                                                                                               \
    return r

/* Initialised, nothing limited, and the region already marked this monitor period: the launch
 * is the driver's. Evaluated before anything that needs a stack frame, so the wrapper is a few
 * loads and a tail jump; everything else is in its noinline slow half. */
static inline int fast_path(void)
{
    struct lb_region_header *h;
    return __builtin_expect(atomic_load_explicit(&lb_state, memory_order_acquire) == LB_STATE_ENFORCE, 1) &&
           !lb_launch_limited && (h = lb_region) != NULL &&
           atomic_load_explicit(&h->recent_kernel, memory_order_relaxed);
}

/* WRAP(w, (params), (args), kernels, blocks): the exported wrapper w and its slow half. */
#define WRAP(w, params, args, kernels, blocks)                                                                      \
    static CUresult __attribute__((noinline)) slow_##w params                                                       \
    {                                                                                                               \
        LAUNCH_N(w, kernels, blocks, real args);                                                                    \
    }                                                                                                               \
    LB_EXPORT CUresult w params                                                                                     \
    {                                                                                                               \
        __typeof__(&w) real = (__typeof__(&w))atomic_load_explicit(&lb_real[LB_ID_##w], memory_order_relaxed);      \
        if (__builtin_expect(real != NULL && fast_path(), 1))                                                       \
            return real args;                                                                                       \
        return slow_##w args;                                                                                       \
    }

#define KPARAMS                                                                                                     \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,             \
     unsigned int bz, unsigned int shm, CUstream s, void **params, void **extra)
#define KARGS (f, gx, gy, gz, bx, by, bz, shm, s, params, extra)
WRAP(cuLaunchKernel, KPARAMS, KARGS, 1, grid_blocks(gx, gy, gz))
WRAP(cuLaunchKernel_ptsz, KPARAMS, KARGS, 1, grid_blocks(gx, gy, gz))

#define EX_BLOCKS (config ? grid_blocks(config->gridDimX, config->gridDimY, config->gridDimZ) : 1)
WRAP(cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **params, void **extra),
     (config, f, params, extra), 1, EX_BLOCKS)
WRAP(cuLaunchKernelEx_ptsz, (const CUlaunchConfig *config, CUfunction f, void **params, void **extra),
     (config, f, params, extra), 1, EX_BLOCKS)

#define CPARAMS                                                                                                     \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,             \
     unsigned int bz, unsigned int shm, CUstream s, void **params)
#define CARGS (f, gx, gy, gz, bx, by, bz, shm, s, params)
WRAP(cuLaunchCooperativeKernel, CPARAMS, CARGS, 1, grid_blocks(gx, gy, gz))
WRAP(cuLaunchCooperativeKernel_ptsz, CPARAMS, CARGS, 1, grid_blocks(gx, gy, gz))

/* The launches of the list may be on several devices; they are charged to the current one
 * (the list is one cooperative kernel, and the API is deprecated since CUDA 11.3). */
static uint64_t multi_blocks(const CUDA_LAUNCH_PARAMS *l, unsigned n)
{
    uint64_t sum = 0;
    for (unsigned i = 0; l && i < n; i++) {
        uint64_t b = grid_blocks(l[i].gridDimX, l[i].gridDimY, l[i].gridDimZ);
        sum = __builtin_add_overflow(sum, b, &sum) ? UINT64_MAX : sum;
    }
    return sum;
}

WRAP(cuLaunchCooperativeKernelMultiDevice, (CUDA_LAUNCH_PARAMS * list, unsigned int n, unsigned int flags),
     (list, n, flags), n ? n : 1, multi_blocks(list, n))

WRAP(cuLaunch, (CUfunction f), (f), 1, 1)
WRAP(cuLaunchGrid, (CUfunction f, int w, int h), (f, w, h), 1, legacy_blocks(w, h))
WRAP(cuLaunchGridAsync, (CUfunction f, int w, int h, CUstream s), (f, w, h, s), 1, legacy_blocks(w, h))
