/* The canonical forms the test vectors compare (testdata/limits/README.md). */
#include "limitsfile.h"

#include <stdlib.h>
#include <string.h>

#include "fmt.h"

struct kv {
    char key[64];
    const char *v;
    uint32_t vlen;
    int var;
};

static int kv_cmp(const void *a, const void *b)
{
    return strcmp(((const struct kv *)a)->key, ((const struct kv *)b)->key);
}

size_t lb_file_vars_canonical(const struct lb_file_vars *fv, char *buf, size_t size)
{
    struct kv kv[LB_VAR_COUNT + LB_MAX_OTHER];
    size_t n = 0, o = 0;
    for (int var = 0; var < LB_VAR_COUNT; var++) {
        if (!fv->var[var].set)
            continue;
        char nb[64];
        lb_fmt(kv[n].key, sizeof kv[n].key, "%s", lb_var_name(var, nb, sizeof nb));
        kv[n].v = fv->pool + fv->var[var].off;
        kv[n].vlen = fv->var[var].len;
        kv[n++].var = var;
    }
    for (uint32_t i = 0; i < fv->nother; i++) {
        lb_fmt(kv[n].key, sizeof kv[n].key, "%.*s", (int)fv->other[i].klen, fv->pool + fv->other[i].koff);
        kv[n].v = fv->pool + fv->other[i].v.off;
        kv[n].vlen = fv->other[i].v.len;
        kv[n++].var = -1;
    }
    qsort(kv, n, sizeof kv[0], kv_cmp);
    if (size)
        buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes;
        if (kv[i].var >= 0 && lb_var_is_memory(kv[i].var) && lb_parse_memory(kv[i].v, kv[i].vlen, &bytes) == 0)
            o += lb_fmt(buf + o, size - o, "%s=%llu\n", kv[i].key, (unsigned long long)bytes);
        else
            o += lb_fmt(buf + o, size - o, "%s=%.*s\n", kv[i].key, (int)kv[i].vlen, kv[i].v);
        if (o + 1 >= size)
            break;
    }
    return o;
}

/* The resolved configuration as key=value lines in a fixed order (resolved.env of testdata/limits): every
 * field enforcement depends on, devices without a memory limit and without a compute limit left
 * out, one sm_limit_all line when every device has the same compute limit. Memory in bytes, "refuse" for a device that refuses every allocation. */
size_t lb_config_canonical(const struct lb_config *cfg, char *buf, size_t size)
{
    static const char *const policy[] = {"default", "force", "disable"};
    size_t o = 0;
    if (size)
        buf[0] = '\0';
    o += lb_fmt(buf + o, size - o, "cache_path=%s\n", cfg->cache_path);
    o += lb_fmt(buf + o, size - o, "hostpid_broker=%u\n", cfg->hostpid_broker);
    o += lb_fmt(buf + o, size - o, "log_level=%d\n", cfg->log_level);
    for (int i = 0; i < LB_MAX_DEVICES; i++) {
        if (cfg->mem_limit[i] == 0)
            o += lb_fmt(buf + o, size - o, "mem_limit_%d=refuse\n", i);
        else if (cfg->mem_limit[i] != LB_MEM_UNLIMITED)
            o += lb_fmt(buf + o, size - o, "mem_limit_%d=%llu\n", i, (unsigned long long)cfg->mem_limit[i]);
    }
    o += lb_fmt(buf + o, size - o, "oversubscribe=%u\n", cfg->oversubscribe);
    o += lb_fmt(buf + o, size - o, "policy=%s\n", cfg->policy < 3 ? policy[cfg->policy] : "?");
    o += lb_fmt(buf + o, size - o, "priority=%d\n", cfg->priority);
    int same = 1;
    for (int i = 1; i < LB_MAX_DEVICES; i++)
        same &= cfg->sm_limit[i] == cfg->sm_limit[0];
    if (same && cfg->sm_limit[0] != 100)
        o += lb_fmt(buf + o, size - o, "sm_limit_all=%u\n", cfg->sm_limit[0]);
    for (int i = 0; i < LB_MAX_DEVICES && !same; i++)
        if (cfg->sm_limit[i] != 100)
            o += lb_fmt(buf + o, size - o, "sm_limit_%d=%u\n", i, cfg->sm_limit[i]);
    return o;
}
