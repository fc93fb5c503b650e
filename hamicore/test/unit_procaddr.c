/* The cuGetProcAddress name rule (hooktable.c): what a driver's unknown entry point is matched to
 * by requested name + version + per-thread flag, and that the table agrees with fakegpu's
 * name/version map (src/cuda_api.def, which follows the real driver's). */
#include <stdlib.h>

#include "hooktable.h"
#include "unit.h"

static int id_of(const char *symbol)
{
    for (int id = 0; id < LB_SYM_COUNT; id++)
        if (!strcmp(lb_hook_rows[id].symbol, symbol))
            return id;
    return -2;
}

#define PICK(name, ver, pt, want)                                                                                  \
    do {                                                                                                           \
        int got_ = lb_hook_pick(name, ver, pt), want_ = (want) ? id_of(want) : -1;                                 \
        if (got_ != want_)                                                                                         \
            unit_fail(__FILE__, __LINE__, "pick(%s, %d, %d) = %s, want %s", name, ver, pt,                         \
                      got_ >= 0 ? lb_hook_rows[got_].symbol : "none", (want) ? (const char *)(want) : "none");   \
    } while (0)

static void test_versions(void)
{
    PICK("cuMemAlloc", 12000, 0, "cuMemAlloc_v2");
    PICK("cuMemAlloc", 3020, 0, "cuMemAlloc_v2");
    PICK("cuMemAlloc", 3010, 0, "cuMemAlloc"); /* the legacy 32-bit one: our v1 wrapper */
    PICK("cuMemAlloc", 1000, 0, NULL);         /* older than any row */
    PICK("cuCtxCreate", 11040, 0, "cuCtxCreate_v3");
    PICK("cuCtxCreate", 12000, 0, "cuCtxCreate_v3");
    PICK("cuCtxCreate", 12050, 0, "cuCtxCreate_v4");
    PICK("cuCtxCreate", 13000, 0, "cuCtxCreate_v4");
    PICK("cuGetProcAddress", 11030, 0, "cuGetProcAddress");
    PICK("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
    PICK("cuGetProcAddress", 11020, 0, NULL);
    PICK("cuLaunchKernelEx", 11050, 0, NULL);
    PICK("cuLaunchKernelEx", 11060, 0, "cuLaunchKernelEx");
    /* A newer symbol that is not interposed hides ours: cuMemGetInfo before 3020 is the v1. */
    PICK("cuMemGetInfo", 2000, 0, NULL);
    PICK("cuMemGetInfo", 3020, 0, "cuMemGetInfo_v2");
}

static void test_per_thread(void)
{
    PICK("cuMemAllocAsync", 12000, 1, "cuMemAllocAsync_ptsz");
    PICK("cuMemAllocAsync", 12000, 0, "cuMemAllocAsync");
    PICK("cuLaunchKernel", 7000, 1, "cuLaunchKernel_ptsz");
    PICK("cuLaunchKernel", 4000, 0, "cuLaunchKernel");
    PICK("cuMemFree", 12000, 1, "cuMemFree_v2"); /* no per-thread variant: the plain one */
}

static void test_only_interposed_names(void)
{
    PICK("cuMemAlloc_v2", 12000, 0, NULL); /* rows are matched by base name, as the driver does */
    PICK("cuCtxGetDevice", 12000, 0, NULL); /* called by us, not interposed */
    PICK("nvmlInit", 12000, 0, NULL);
    PICK("cuNoSuchThing", 12000, 0, NULL);
    PICK("", 12000, 0, NULL);
    /* Every interposed CUDA row answers at its own version, and no two rows overlap. */
    for (int id = 0; id < LB_SYM_COUNT; id++) {
        const struct lb_hook_row *r = &lb_hook_rows[id];
        if (r->lib != LB_LIB_CUDA || !r->since)
            continue;
        CHECK(r->until == 0 || r->until > r->since);
        if (lb_hook_pick(r->name, r->since, r->ptds) != id)
            unit_fail(__FILE__, __LINE__, "row %s is not what %s at %d picks", r->symbol, r->name, r->since);
    }
}

/* fakegpu's cuda_api.def lines: FG_CUDA(KIND, "name", version, symbol, per_thread_symbol). */
static void test_agrees_with_fakegpu(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/../../fakegpu/src/cuda_api.def", unit_vectors_dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        printf("    (skipped: %s not found)\n", path);
        return;
    }
    char line[512];
    int checked = 0;
    while (fgets(line, sizeof line, f)) {
        char kind[16], name[128], sym[128], pt[128];
        int ver;
        if (sscanf(line, "FG_CUDA(%15[^,], \"%127[^\"]\", %d, %127[^,], %127[^)])", kind, name, &ver, sym, pt) != 5)
            continue;
        const char *syms[2] = {sym, pt};
        for (int k = 0; k < 2; k++) {
            int id = id_of(syms[k]);
            if (id < 0 || !lb_hook_rows[id].since)
                continue; /* not interposed (or NONE) */
            const struct lb_hook_row *r = &lb_hook_rows[id];
            if (strcmp(r->name, name) || r->since != ver || r->ptds != k)
                unit_fail(__FILE__, __LINE__, "%s: ours %s since %d ptds %d, fakegpu %s at %d ptds %d", syms[k],
                          r->name, r->since, r->ptds, name, ver, k);
            /* ...and the driver's answer at the row's version is the row's symbol. */
            if (lb_hook_pick(name, ver, k) != id)
                unit_fail(__FILE__, __LINE__, "%s at %d: not picked", name, ver);
            checked++;
        }
    }
    fclose(f);
    CHECK(checked >= 30);
}

const struct unit_test unit_procaddr_tests[] = {
    {"procaddr/name + version picks the versioned symbol", test_versions},
    {"procaddr/per-thread flag picks the _ptsz variant", test_per_thread},
    {"procaddr/only interposed names, no overlapping rows", test_only_interposed_names},
    {"procaddr/table agrees with fakegpu's cuda_api.def", test_agrees_with_fakegpu},
    {NULL, NULL},
};
