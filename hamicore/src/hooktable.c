#include "hooktable.h"

#include <string.h>

#define CUDA LB_LIB_CUDA
#define NVML LB_LIB_NVML
const struct lb_hook_row lb_hook_rows[LB_SYM_COUNT] = {
#define LB_HOOK(lib, name, sym, w, since, until, ptds) [LB_ID_##w] = {#name, #sym, since, until, ptds, lib},
#define LB_NEED(lib, sym) [LB_ID_##sym] = {#sym, #sym, 0, 0, 0, lib},
#include "hooks.def"
#undef LB_HOOK
#undef LB_NEED
};
#undef CUDA
#undef NVML

int lb_hook_pick(const char *name, int cudaVersion, int per_thread)
{
    int plain = -1, variant = -1;
    for (int id = 0; id < LB_SYM_COUNT; id++) {
        const struct lb_hook_row *r = &lb_hook_rows[id];
        /* since == 0: an NVML row or an LB_NEED, never an answer of cuGetProcAddress */
        if (r->lib != LB_LIB_CUDA || r->since == 0 || cudaVersion < r->since || (r->until && cudaVersion >= r->until) ||
            strcmp(r->name, name) != 0)
            continue;
        if (r->ptds)
            variant = id;
        else
            plain = id;
    }
    return per_thread && variant >= 0 ? variant : plain;
}
