/* Kernel launches: every entry point that starts device work (cuLaunchKernel, cuLaunchKernelEx,
 * their _ptsz variants, the cooperative launches and the legacy cuLaunch/cuLaunchGrid[Async]).
 *
 * Each one first marks the container as having launched recently (one relaxed load of a shared
 * word; the store happens once per monitor period): the node monitor needs that from every
 * container, limited or not. With nothing limited and no node scheduler (lb_launch_gated == 0)
 * the wrapper is then one flag and a tail call; while the container holds its slice it is the
 * gate's fast path (gate.h). Otherwise the launch goes through the gate's slow path (it waits for
 * the slice, or is paced alone), then calls the driver with the reentrancy guard up, so a driver
 * whose _ptsz/Ex entry points call the plain one through its export is not gated twice, and
 * afterwards records the batch's marker if one is due. */
#include "ctxcache.h"
#include "gate.h"
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

/* The gated launch: the gate's slow path, the driver guarded, the marker. */
#define LAUNCH_N(w, kernels, blocks, stream, pt, call)                                                             \
    __typeof__(&w) real = LB_REAL(w);                                                                               \
    if (!real)                                                                                                      \
        return CUDA_ERROR_NOT_FOUND;                                                                                \
    if (__builtin_expect(!lb_active(), 0))                                                                          \
        return call;                                                                                                \
    lb_mark_launch();                                                                                               \
    int dev, cur;                                                                                                   \
    if (!lb_launch_gated || lb_guard || (cur = lb_cur_device(&dev)) == LB_DEV_NONE)                                 \
        return call; /* nothing gated; re-entered from the driver; no context (the driver refuses it) */          \
    if (cur != 0)                                                                                                   \
        return lb_gate_beyond(); /* an ordinal no gate can hold: refused, never ungated */                         \
    int mark = lb_gate_enter(dev, stream, pt, kernels, blocks);                                                    \
    lb_guard_enter();                                                                                               \
    CUresult r = call;                                                                                              \
    lb_guard_leave();                                                                                               \
    if (mark && r == CUDA_SUCCESS)                                                                                  \
        lb_gate_after(dev, stream, pt);                                                                             \
    return r

/* The launch is the driver's, with nothing to do here: without a compute limit or a scheduler,
 * the library initialised and the region already marked this monitor period; with them, the
 * gate open (the container holds its slice, or runs free: gate.h; a gate opens only on a launch
 * of the enforcing library, and the helper marks the region for the monitor meanwhile).
 * Evaluated before anything that needs a stack frame, so the wrapper is a few loads and a tail
 * jump; everything else is in its noinline slow half. */
static inline int fast_path(void)
{
    struct lb_region_header *h;
    if (__builtin_expect(lb_launch_gated, 0))
        return lb_gate_pass();
    return __builtin_expect(atomic_load_explicit(&lb_state, memory_order_acquire) == LB_STATE_ENFORCE, 1) &&
           (h = lb_region) != NULL && atomic_load_explicit(&h->recent_kernel, memory_order_relaxed);
}

/* WRAP(w, (params), (args), kernels, blocks, stream, pt): the exported wrapper w and its slow half. */
#define WRAP(w, params, args, kernels, blocks, stream, pt)                                                          \
    static CUresult __attribute__((noinline)) slow_##w params                                                       \
    {                                                                                                               \
        LAUNCH_N(w, kernels, blocks, stream, pt, real args);                                                        \
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
WRAP(cuLaunchKernel, KPARAMS, KARGS, 1, grid_blocks(gx, gy, gz), s, 0)
WRAP(cuLaunchKernel_ptsz, KPARAMS, KARGS, 1, grid_blocks(gx, gy, gz), s, 1)

#define EX_BLOCKS (config ? grid_blocks(config->gridDimX, config->gridDimY, config->gridDimZ) : 1)
#define EX_STREAM (config ? config->hStream : NULL)
WRAP(cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **params, void **extra),
     (config, f, params, extra), 1, EX_BLOCKS, EX_STREAM, 0)
WRAP(cuLaunchKernelEx_ptsz, (const CUlaunchConfig *config, CUfunction f, void **params, void **extra),
     (config, f, params, extra), 1, EX_BLOCKS, EX_STREAM, 1)

#define CPARAMS                                                                                                     \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,             \
     unsigned int bz, unsigned int shm, CUstream s, void **params)
#define CARGS (f, gx, gy, gz, bx, by, bz, shm, s, params)
WRAP(cuLaunchCooperativeKernel, CPARAMS, CARGS, 1, grid_blocks(gx, gy, gz), s, 0)
WRAP(cuLaunchCooperativeKernel_ptsz, CPARAMS, CARGS, 1, grid_blocks(gx, gy, gz), s, 1)

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
     (list, n, flags), n ? n : 1, multi_blocks(list, n), list && n ? list[0].hStream : NULL, 0)

WRAP(cuLaunch, (CUfunction f), (f), 1, 1, NULL, 0)
WRAP(cuLaunchGrid, (CUfunction f, int w, int h), (f, w, h), 1, legacy_blocks(w, h), NULL, 0)
WRAP(cuLaunchGridAsync, (CUfunction f, int w, int h, CUstream s), (f, w, h, s), 1, legacy_blocks(w, h), s, 0)
