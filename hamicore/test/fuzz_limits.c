/* libFuzzer target for the limits reader: arbitrary bytes, split into arbitrary chunks (the first
 * byte picks the chunk size), must never crash, overflow, or leave an out-of-range value. The
 * canonical dump and the resolution run too, with a fake environment taken from the input. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "limitsfile.h"

static struct lb_file_vars fv;
static struct lb_config cfg;
static struct lb_diags dg;
static char canon[1 << 17];

static const char *env_from(const char *name, void *ctx)
{
    (void)ctx;
    /* A deterministic but input-independent environment exercising the env-side parsers. */
    if (!strcmp(name, "CUDA_DEVICE_MEMORY_LIMIT_1"))
        return "12x";
    if (!strcmp(name, "CUDA_DEVICE_SM_LIMIT"))
        return "70";
    if (!strcmp(name, "CUDA_DEVICE_MEMORY_LIMIT_0"))
        return "0";
    if (!strcmp(name, "GPU_CORE_UTILIZATION_POLICY"))
        return "disable";
    if (!strcmp(name, "CUDA_DEVICE_MEMORY_SHARED_CACHE"))
        return "/tmp/private.cache";
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t step = size ? (size_t)data[0] % 64 + 1 : 1;
    struct lb_reader r;
    memset(&dg, 0, sizeof dg);
    lb_reader_init(&r, &fv, &dg, "/overrideEnv", size && (data[0] & 0x80));
    for (size_t off = 0; off < size; off += step)
        lb_reader_feed(&r, (const char *)data + off, size - off < step ? size - off : step);
    lb_reader_finish(&r);
    lb_file_vars_canonical(&fv, canon, sizeof canon);
    lb_resolve(&fv, env_from, NULL, 0, &cfg, &dg);
    for (int i = 0; i < LB_MAX_DEVICES; i++)
        if (cfg.sm_limit[i] < 1 || cfg.sm_limit[i] > 100)
            __builtin_trap();
    /* File mode: nothing the file governs comes from the environment. */
    for (int i = 0; i < LB_MAX_DEVICES; i++)
        if (cfg.mem_src[i] == LB_SRC_ENV)
            __builtin_trap();
    if (cfg.cache_src == LB_SRC_ENV || (cfg.policy == LB_POLICY_DISABLE && !fv.var[LB_VAR_POLICY].set))
        __builtin_trap();
    /* Env mode: "12x" from the environment must refuse, never lift the cap. */
    lb_resolve(NULL, env_from, NULL, 0, &cfg, &dg);
    if (cfg.mem_limit[1] != 0)
        __builtin_trap();
    if (dg.n > LB_MAX_DIAGS || fv.pool_used > LB_POOL_SIZE || strlen(cfg.cache_path) >= LB_LINE_MAX)
        __builtin_trap();
    uint64_t v;
    (void)lb_parse_memory((const char *)data, size, &v);
    return 0;
}
