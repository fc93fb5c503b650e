/* The rows of hooks.def as plain data (no wrapper addresses), and the cuGetProcAddress name rule
 * over them: pure, so the unit tests link it without the wrappers. */
#ifndef LB_HOOKTABLE_H
#define LB_HOOKTABLE_H

#include "symbols.h"

struct lb_hook_row {
    const char *name, *symbol;
    int since, until; /* cuGetProcAddress(name, v) means symbol for since <= v < until (0: open) */
    unsigned char ptds, lib;
};

extern const struct lb_hook_row lb_hook_rows[LB_SYM_COUNT];

/* The interposed row (an LB_HOOK, never an LB_NEED) that cuGetProcAddress(name, cudaVersion) with
 * or without CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM stands for, or -1 if none does:
 *   1. CUDA rows whose name is `name` and whose [since, until) holds cudaVersion;
 *   2. per_thread: the row with ptds = 1 among them if there is one, else the one with ptds = 0;
 *      otherwise only ptds = 0. */
int lb_hook_pick(const char *name, int cudaVersion, int per_thread);

#endif
