/*
 * The process-wide state every other cuda_*.c uses (fg_cu), and the modules' registration list:
 * a module that keeps a table per context or per process adds itself here at load time (a
 * constructor), and a context's death or a fork reaches it through the list, so that this file
 * and the context's never call the modules by name (no file calls the others in a loop).
 */

#include "cuda_internal.h"

fg_cuda fg_cu = {.mu = PTHREAD_MUTEX_INITIALIZER, .st = FG_STATE_DETACHED};

/* fork: hold our mutex across it so the child gets a consistent table, then make the child a
 * fresh process for the device: no contexts, no allocations, its own state slot. */
static void fork_prepare(void) { pthread_mutex_lock(&fg_cu.mu); }
static void fork_parent(void) { pthread_mutex_unlock(&fg_cu.mu); }
/* The registered modules, by stage (registration order within one). Written only by constructors,
 * which run before any thread of the process can call the library; read-only afterwards. */
#define FG_MAX_OBSERVERS 8
static const fg_cu_observer *observers[FG_CU_STAGES][FG_MAX_OBSERVERS];
static int nobservers[FG_CU_STAGES];

void fg_cu_observe(const fg_cu_observer *o, int stage) {
    if (stage < 0 || stage >= FG_CU_STAGES || nobservers[stage] == FG_MAX_OBSERVERS) {
        fg_cu.init_rc = CUDA_ERROR_NOT_INITIALIZED; /* a module left out would keep stale tables: refuse */
        fg_log("internal: no room to register a module (stage %d): cuInit will fail", stage);
        return;
    }
    observers[stage][nobservers[stage]++] = o;
}

void fg_cu_ctx_gone(fg_ctx *c) {
    for (int s = 0; s < FG_CU_STAGES; s++)
        for (int i = 0; i < nobservers[s]; i++)
            if (observers[s][i]->ctx_gone)
                observers[s][i]->ctx_gone(c);
}

static void fork_child(void) {
    for (int s = 0; s < FG_CU_STAGES; s++)
        for (int i = 0; i < nobservers[s]; i++)
            if (observers[s][i]->forget_all)
                observers[s][i]->forget_all();
    fg_state_after_fork(&fg_cu.st);
    pthread_mutex_unlock(&fg_cu.mu);
}
/* Registered when the library is loaded (registration only): a fork racing with the first
 * cuInit, which holds the mutex, must wait for it rather than leave the child's copy locked. */
static void __attribute__((constructor)) register_atfork(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

CUresult fg_cu_ready(void) {
    return __atomic_load_n(&fg_cu.initialized, __ATOMIC_ACQUIRE) ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

int fg_cu_dev_valid(CUdevice d) { return d >= 0 && d < fg_cu.ndev; }

int fg_cu_lost(int ordinal) {
    return fg_cu.cfg.faults.lost_device >= 0 && fg_cu_dev_valid(ordinal) &&
           fg_cu.dev[ordinal].phys == (unsigned)fg_cu.cfg.faults.lost_device;
}
