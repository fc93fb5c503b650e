/*
 * cuCtxSetLimit: three limits are device memory the program chooses without allocating it — the
 * malloc heap of device code, the printf FIFO, and the stack of every thread the GPU can hold
 * resident (the stack size times the SMs times their resident threads). What a context holds
 * beyond the values it had when the library first saw it (the driver's defaults, part of the
 * context's own cost) is charged to its GPU before the driver is called, refused when it does not
 * fit, and released when the limit goes down or the context is destroyed.
 *
 * One entry per context that raised one of them, in a fixed table under a mutex (cuCtxSetLimit is
 * rare); a full table refuses a raise rather than leave it uncharged.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "ctxcache.h"
#include "context.h"
#include "devmap.h"
#include "guard.h"
#include "init.h"
#include "log.h"
#include "noregion.h"
#include "region.h"
#include "symbols.h"

#define MAX_CTX 256
#define NMEM 3 /* CU_LIMIT_STACK_SIZE, CU_LIMIT_PRINTF_FIFO_SIZE, CU_LIMIT_MALLOC_HEAP_SIZE */

struct ctxlim {
    uintptr_t ctx; /* 0: free */
    int dev;       /* its GPU (region index) */
    uint64_t threads; /* resident threads of the GPU: what one byte of stack size costs */
    uint64_t base[NMEM], now[NMEM];
    uint64_t charged;
};

static struct ctxlim g_cl[MAX_CTX];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void prepare(void) { pthread_mutex_lock(&g_mu); }
static void parent(void) { pthread_mutex_unlock(&g_mu); }
static void child(void)
{
    memset(g_cl, 0, sizeof g_cl); /* the child has no contexts */
    pthread_mutex_unlock(&g_mu);
}
static void __attribute__((constructor(101))) ctxlimit_register_fork(void) { pthread_atfork(prepare, parent, child); }

static uint64_t extra(const struct ctxlim *c)
{
    uint64_t sum = 0;
    for (int l = 0; l < NMEM; l++) {
        uint64_t more = c->now[l] > c->base[l] ? c->now[l] - c->base[l] : 0;
        if (l == CU_LIMIT_STACK_SIZE && __builtin_mul_overflow(more, c->threads, &more))
            more = UINT64_MAX;
        if (__builtin_add_overflow(sum, more, &sum))
            sum = UINT64_MAX;
    }
    return sum;
}

/* The context's entry, made with the driver's current values; NULL: full, or not readable. Called
 * with g_mu held and the guard up. */
static struct ctxlim *entry(uintptr_t ctx, int dev, int ord)
{
    struct ctxlim *free_slot = NULL;
    for (int i = 0; i < MAX_CTX; i++) {
        if (g_cl[i].ctx == ctx)
            return &g_cl[i];
        if (!g_cl[i].ctx && !free_slot)
            free_slot = &g_cl[i];
    }
    __typeof__(&cuCtxGetLimit) get = LB_REAL(cuCtxGetLimit);
    __typeof__(&cuDeviceGetAttribute) attr = LB_REAL(cuDeviceGetAttribute);
    int sms = 0, per = 0;
    if (!free_slot || !get || !attr || attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ord) != CUDA_SUCCESS ||
        attr(&per, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, ord) != CUDA_SUCCESS || sms <= 0 || per <= 0)
        return NULL;
    struct ctxlim c = {ctx, dev, (uint64_t)sms * (uint64_t)per, {0}, {0}, 0};
    for (int l = 0; l < NMEM; l++) {
        size_t v;
        if (get(&v, (CUlimit)l) != CUDA_SUCCESS)
            return NULL;
        c.base[l] = c.now[l] = v;
    }
    *free_slot = c;
    return free_slot;
}

LB_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    __typeof__(&cuCtxSetLimit) real = LB_REAL(cuCtxSetLimit);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    int e = lb_guard ? lb_guarded(__builtin_return_address(0)) : lb_active();
    if ((int)limit < 0 || limit >= NMEM || e == 0)
        return real(limit, value);
    int dev, ord;
    int cur = e > 0 ? lb_cur_mem(&dev, &ord) : LB_CUR_UNKNOWN;
    if (cur == LB_CUR_NONE)
        return real(limit, value); /* no context: the driver refuses */
    if (cur != 0) {
        LB_WARN("cuCtxSetLimit: refused: %s", e < 0 ? "called inside another CUDA call of the library (a signal handler?)"
                                                   : "the library cannot tell which GPU the context is on");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!lb_region) {
        lb_log_no_region("cuCtxSetLimit");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uintptr_t ctx = lb_cur_ctx();
    lb_lock(&g_mu);
    lb_guard_enter();
    struct ctxlim *c = entry(ctx, dev, ord);
    lb_guard_leave();
    if (!c) {
        lb_unlock(&g_mu);
        LB_WARN("cuCtxSetLimit: refused: more than %d contexts with raised limits, or the driver's limits cannot be "
                "read",
                MAX_CTX);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t before = c->charged, old = c->now[limit];
    c->now[limit] = value;
    uint64_t after = extra(c);
    if (after > before && !lb_region_reserve(dev, after - before)) {
        c->now[limit] = old;
        lb_unlock(&g_mu);
        LB_WARN("cuCtxSetLimit: device %d: %llu more bytes refused: the container uses %llu of its %llu-byte limit", dev,
                (unsigned long long)(after - before), (unsigned long long)lb_region_usage(dev),
                (unsigned long long)lb_region_limit(dev));
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->charged = after;
    /* The driver is called under the table's mutex: another thread's raise of the same context
     * must not interleave with this one's settle. */
    lb_guard_enter();
    CUresult r = real(limit, value);
    lb_guard_leave();
    if (r != CUDA_SUCCESS) {
        c->now[limit] = old;
        c->charged = before;
        if (after > before)
            lb_region_release(dev, after - before);
    } else if (after < before) {
        lb_region_release(dev, before - after);
    }
    lb_unlock(&g_mu);
    return r;
}

static void ctxlimit_gone(uintptr_t ctx)
{
    lb_lock(&g_mu);
    for (int i = 0; i < MAX_CTX; i++)
        if (g_cl[i].ctx == ctx) {
            if (g_cl[i].charged)
                lb_region_release(g_cl[i].dev, g_cl[i].charged);
            memset(&g_cl[i], 0, sizeof g_cl[i]);
        }
    lb_unlock(&g_mu);
}
static void __attribute__((constructor)) ctxlimit_gone_register(void) { lb_ctx_on_gone(LB_CTX_GONE_LIMITS, ctxlimit_gone); }
