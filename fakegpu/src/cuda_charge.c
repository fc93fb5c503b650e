/*
 * Device memory charged in the shared state outside the allocation table (VMM physical
 * allocations, pool and graph reserves, a context's limits), and the delay a test can put on every
 * allocation: the part of device memory every other cuda_*.c file uses, below all of them.
 */
#include <errno.h>
#include <stdatomic.h>
#include <time.h>

#include "cuda_internal.h"

CUresult fg_mem_charge(int ordinal, uint64_t bytes) {
    if (fg_state_lock(&fg_cu.st) != 0)
        return CUDA_ERROR_UNKNOWN;
    int rc = fg_state_charge(&fg_cu.st, fg_cu.dev[ordinal].unit, bytes, fg_cu.dev[ordinal].total, 0);
    fg_state_unlock(&fg_cu.st);
    if (rc == -2)
        fg_log("more than %d processes use the device state %s", FG_MAX_SLOTS, fg_cu.st.path);
    return rc == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

void fg_mem_uncharge(int ordinal, uint64_t bytes) {
    if (bytes == 0 || fg_state_lock(&fg_cu.st) != 0)
        return;
    fg_state_release(&fg_cu.st, fg_cu.dev[ordinal].unit, bytes, 0);
    fg_state_unlock(&fg_cu.st);
}

/* fakegpuSetAllocDelayMs(N): from now on every device allocation spends N ms in the driver before
 * it takes any lock, as a slow real one can; 0 ends it. A test slows down a few calls so that a
 * signal arriving then finds its thread inside the driver. Not a CUDA entry point: a program finds
 * it with dlsym and, on a real driver, does without. An atomic load on the allocation path: no
 * environment is read there (its cost would grow with the environment). */
static _Atomic int alloc_delay_ms;

FG_EXPORT void fakegpuSetAllocDelayMs(int ms) {
    atomic_store(&alloc_delay_ms, ms < 0 ? 0 : ms > 60000 ? 60000 : ms);
}

void fg_alloc_delay(void) {
    int ms = atomic_load_explicit(&alloc_delay_ms, memory_order_relaxed);
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}
