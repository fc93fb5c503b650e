/*
 * The one initialization pipeline, run once (under g_init_mu) from the first CUDA or NVML entry
 * point — there is no constructor doing work:
 *   1. configuration: /overrideEnv, then the environment (config.c), before anything else;
 *   2. logging: the level is now known; diagnostics collected so far are printed;
 *   3. the shared region (usage.cache) and this process's slot (region.c);
 *   4. fork handling (handlers registered at load): a child gets its own slot at its first
 *      allocation.
 * Driver symbols are resolved lazily, on first use (symbols.c).
 */
#include "init.h"

#include <pthread.h>

#include "config.h"
#include "gate.h"
#include "limiter.h"
#include "log.h"
#include "region.h"

_Atomic int lb_state = LB_STATE_UNINIT;

/* fork: each module registers its own handlers (memory, vmm, graph, reserve, region); these
 * are the initialisation's. A fork while another thread initialises waits for it (prepare), so
 * the child never inherits a half-done initialisation nor a lock held by it. */
static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;

static void fork_prepare(void) { pthread_mutex_lock(&g_init_mu); }
static void fork_parent(void) { pthread_mutex_unlock(&g_init_mu); }
static void fork_child(void)
{
    pthread_mutex_unlock(&g_init_mu);
    /* The child is a new process: it must not charge the parent's slot. Only flags are touched
     * here (the device cache drops itself: ctxcache.c); the new slot is claimed lazily. */
    if (atomic_load_explicit(&lb_state, memory_order_acquire) == LB_STATE_ENFORCE) {
        lb_limiter_after_fork();
        lb_gate_after_fork();
    }
}

/* Registration only, when the library is loaded: no work in a constructor. After every other
 * module's (priority 101): prepare handlers run in reverse order, so this one takes the
 * initialisation lock before any module lock the initialisation itself may take. */
static void __attribute__((constructor(102))) init_register_fork(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Under g_init_mu. */
static void init_once(void)
{
    lb_guard_enter();
    lb_config_load();
    /* No opt-out here: CUDA_DISABLE_CONTROL is the device plugin's (it leaves out the preload). */
    lb_region_init(&lb_cfg);
    lb_limiter_init();
    lb_gate_init(); /* after the pacing: it knows whether any device is paced (lb_launch_limited) */
    lb_guard_leave();
    atomic_store_explicit(&lb_state, LB_STATE_ENFORCE, memory_order_release);
}

/* Once, without pthread_once: a fork while another thread is inside pthread_once leaves the
 * child a once-control "in progress" that only glibc's fork generation count resets
 * (ThreadSanitizer's pthread_once, and other C libraries, wait on it forever: seen as a hung
 * child in path-fork under TSan). Here the whole initialisation holds g_init_mu, which
 * fork_prepare takes too, so a child sees either no initialisation or a finished one, and
 * runs its own in the first case. */
int lb_active_slow(void)
{
    if (lb_guard)
        return 0;
    if (atomic_load_explicit(&lb_state, memory_order_acquire) != LB_STATE_ENFORCE) {
        lb_lock(&g_init_mu);
        if (atomic_load_explicit(&lb_state, memory_order_relaxed) != LB_STATE_ENFORCE)
            init_once();
        lb_unlock(&g_init_mu);
    }
    return atomic_load_explicit(&lb_state, memory_order_acquire) == LB_STATE_ENFORCE;
}
