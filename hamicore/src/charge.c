/*
 * The allocation tables of charge.h (device pointers, CUDA arrays) outside their inline paths:
 * the tables themselves, their clearing after a fork, a destroyed context's entries, and the
 * messages of a refusal. Every allocation hook (memory.c, mempool.c, ipc.c, vmm.c, graph.c,
 * ctxlimit.c) uses this file; it uses none of them.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "charge.h"
#include "context.h"
#include "log.h"

/* fork: the parent's allocations are not the child's to free. Clearing 1.7 MB of tables in every
 * child would cost each DataLoader-style worker that never touches CUDA; instead the child marks
 * them stale and the first of its own CUDA calls that reaches a table clears them, once. */
struct entry lb_ptr_e[1u << LB_PTR_BITS], lb_array_e[1u << LB_ARRAY_BITS];
_Atomic int lb_full_logged[2];
_Atomic uint32_t lb_table_live[2];
_Atomic int lb_mem_stale;
static pthread_once_t g_clear_once = PTHREAD_ONCE_INIT;

static void clear_tables(void)
{
    memset(lb_ptr_e, 0, sizeof lb_ptr_e);
    memset(lb_array_e, 0, sizeof lb_array_e);
    atomic_store(&lb_table_live[0], 0);
    atomic_store(&lb_table_live[1], 0);
    atomic_store_explicit(&lb_mem_stale, 0, memory_order_release);
}

void lb_mem_clear_stale(void)
{
    lb_guard_enter(); /* guard.h: a signal handler arriving meanwhile must not wait for the once */
    pthread_once(&g_clear_once, clear_tables);
    lb_guard_leave();
}

static void fork_child(void)
{
    g_clear_once = (pthread_once_t)PTHREAD_ONCE_INIT;
    atomic_store_explicit(&lb_mem_stale, 1, memory_order_relaxed);
}

/* Registration only (no work): handlers must exist before the first fork, even one racing with
 * the library's initialisation. */
static void __attribute__((constructor(101))) memory_register_fork(void) { pthread_atfork(NULL, NULL, fork_child); }

/* Every entry the destroyed context owned: the driver freed it. */
static void memory_ctx_gone(uintptr_t ctx)
{
    /* A forked child's tables are its parent's until cleared: none of that is the child's to free
     * (the child's contexts can even have the same handles as the parent's). */
    if (atomic_load_explicit(&lb_mem_stale, memory_order_acquire))
        lb_mem_clear_stale();
    const struct table *ts[2] = {&g_ptrs, &g_arrays};
    for (int t = 0; t < 2; t++) {
        uint32_t n = 1u << ts[t]->bits;
        for (uint32_t i = 0; i < n; i++) {
            struct entry *e = &ts[t]->e[i];
            uint64_t cur = atomic_load_explicit(&e->key, memory_order_acquire);
            if (cur < K_BIAS || atomic_load_explicit(&e->kind, memory_order_relaxed) != E_DIRECT ||
                atomic_load_explicit(&e->owner, memory_order_relaxed) != ctx)
                continue;
            uint64_t size = atomic_load_explicit(&e->size, memory_order_relaxed);
            int dev = atomic_load_explicit(&e->dev, memory_order_relaxed);
            if (atomic_compare_exchange_strong(&e->key, &cur, K_TOMB)) {
                table_give(ts[t]);
                lb_region_release(dev, size);
            }
        }
    }
}
static void __attribute__((constructor)) memory_ctx_gone_register(void) { lb_ctx_on_gone(LB_CTX_GONE_MEMORY, memory_ctx_gone); }

void lb_table_log_full(const struct table *t)
{
    if (!atomic_exchange(t->full_logged, 1))
        LB_ERROR("more than %u live %s: further ones are refused", (1u << t->bits) / 8 * 7, t->what);
}

void lb_log_reentered(const char *api)
{
    static _Atomic int logged;
    if (!atomic_exchange(&logged, 1))
        LB_WARN("%s: refused: called while this thread was inside another CUDA call of the library (a signal "
                "handler?), where it cannot be charged",
                api);
}

void lb_log_no_region(const char *api)
{
    static _Atomic int logged;
    if (!atomic_exchange(&logged, 1))
        LB_ERROR("%s: refused, as every allocation of this process: %s", api,
                 lb_region_refusal ? lb_region_refusal : "no usage region could be attached");
}

void lb_log_refusal(const char *api, int dev, uint64_t bytes)
{
    /* Read again for the message only: other processes may have moved since the refusal. */
    LB_WARN("%s: device %d: %llu bytes refused: the container uses %llu of its %llu-byte limit", api, dev,
            (unsigned long long)bytes, (unsigned long long)lb_region_usage(dev),
            (unsigned long long)lb_region_limit(dev));
}

void lb_log_unplaced(const char *api)
{
    LB_WARN("%s: CUDA device %d: refused: the library cannot tell which GPU it is, so its memory cannot be charged",
            api, lb_tls_dev.ord);
}
