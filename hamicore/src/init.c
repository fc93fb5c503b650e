/*
 * The one initialization pipeline, run once (pthread_once) from the first CUDA or NVML entry
 * point — there is no constructor doing work:
 *   1. configuration: /overrideEnv, then the environment (config.c), before anything else;
 *   2. logging: the level is now known; diagnostics collected so far are printed;
 *   3. CUDA_DISABLE_CONTROL=true: stop here, pure pass-through;
 *   4. the shared region (usage.cache) and this process's slot (region.c);
 *   5. fork handling: a child gets its own slot at its first allocation.
 * Driver symbols are resolved lazily, on first use (symbols.c).
 */
#include "init.h"

#include <pthread.h>

#include "config.h"
#include "context.h"
#include "limiter.h"
#include "log.h"
#include "memory.h"
#include "region.h"

_Atomic int lb_state = LB_STATE_UNINIT;
_Thread_local int lb_guard __attribute__((tls_model("initial-exec")));
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void atfork_child(void)
{
    /* The child is a new process: it must not charge the parent's slot nor free the parent's
     * pointers. Only flags are touched here; the new slot is claimed lazily. */
    lb_region_after_fork();
    lb_ctx_changed_all();
    lb_limiter_after_fork();
}

static void init_once(void)
{
    lb_guard_enter();
    lb_config_load();
    int state = LB_STATE_ENFORCE;
    if (lb_cfg.disable_control) {
        LB_INFO("CUDA_DISABLE_CONTROL=true: no limits are enforced in this process");
        state = LB_STATE_PASSTHROUGH;
    } else {
        /* Before the region: a fork while this thread holds the region's claim lock must give a
         * child that re-initialises it (the child runs this pipeline again). */
        pthread_atfork(NULL, NULL, atfork_child);
        lb_region_init(&lb_cfg);
        lb_limiter_init();
    }
    lb_guard_leave();
    atomic_store_explicit(&lb_state, state, memory_order_release);
}

int lb_active_slow(void)
{
    if (lb_guard)
        return 0;
    pthread_once(&g_once, init_once);
    return atomic_load_explicit(&lb_state, memory_order_acquire) == LB_STATE_ENFORCE;
}
