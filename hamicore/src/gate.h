/* The launch gate (gate.c): every kernel launch path asks it whether the launch may go now.
 *
 * With the node's scheduler (a grant file, schedclient.h) a device's launches go while the
 * container holds its slice (or runs free) and wait otherwise; without it, or while the scheduler
 * is silent, a limited device is paced by this process alone (limiter.c). The fast path below is
 * what a launch costs while the container holds its slice: a few loads, one compare and one
 * decrement (docs/benchmarks.md: the added instructions per launch). */
#ifndef LB_GATE_H
#define LB_GATE_H

#include <stdatomic.h>
#include <stdint.h>

#include "ctxcache.h"
#include "gatestate.h"
#include "limitbed/cuda_abi.h"

/* One launch of the batch taken: 1 if more are left (x86-64: one locked decrement and its flags). */
static inline int lb_gate_take(_Atomic int32_t *left)
{
#if defined(__x86_64__) && defined(__GCC_ASM_FLAG_OUTPUTS__) && !defined(__SANITIZE_THREAD__)
    int more;
    __asm__ __volatile__("lock decl %0" : "+m"(*(int32_t *)left), "=@ccg"(more));
    return more;
#else
    return atomic_fetch_sub_explicit(left, 1, memory_order_relaxed) > 1;
#endif
}

static inline int lb_gate_pass(void)
{
    if (__builtin_expect(lb_tls_dev.epoch != atomic_load_explicit(&lb_ctx_epoch, memory_order_relaxed), 0))
        return 0;
    /* A valid cache holds an ordinal below LB_CTX_MAX_ORD (context.c): it indexes the gates. */
    struct lb_gate_fast *g = &lb_gates[lb_tls_dev.ord];
    const _Atomic uint32_t *w = atomic_load_explicit(&g->word, memory_order_relaxed);
    return atomic_load_explicit(w, memory_order_relaxed) == atomic_load_explicit(&g->open, memory_order_relaxed) &&
           lb_gate_take(&g->left);
}

/* The slow path of a launch of `kernels` kernels of `blocks` thread blocks in all on device dev
 * into stream s (per_thread: a _ptsz entry point, whose NULL stream is the thread's): waits for
 * the container's slice, or paces alone. Returns 1 when the caller must call lb_gate_after with
 * the same device and stream once the launch was made. */
int lb_gate_enter(int dev, CUstream s, int per_thread, uint64_t kernels, uint64_t blocks);
void lb_gate_after(int dev, CUstream s, int per_thread);
/* A gated launch on an ordinal past the gates' arrays (LB_CTX_MAX_ORD, the region's 16 devices):
 * says so once and refuses it, CUDA_ERROR_NOT_PERMITTED. A process sees such an ordinal only with
 * more than 16 GPUs (or, on fakegpu, MIG instances) visible; its launches there cannot be held to
 * a limit or a slice, and passing them would leave them unlimited. */
CUresult lb_gate_beyond(void);

/* At initialisation (after the limiter's): maps the scheduler's files. */
void lb_gate_init(void);
void lb_gate_after_fork(void);

#endif
