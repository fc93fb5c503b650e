/*
 * The limits file's vocabulary: the variables libvgpu reads, their names, the memory grammar and
 * the diagnostics list. Shared by the reader, the resolver and the canonical form.
 */
#include "limitsfile.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"

static const char *const k_fixed_names[] = {
    [LB_VAR_CACHE] = "CUDA_DEVICE_MEMORY_SHARED_CACHE",
    [LB_VAR_OVERSUBSCRIBE] = "CUDA_OVERSUBSCRIBE",
    [LB_VAR_POLICY] = "GPU_CORE_UTILIZATION_POLICY",
    [LB_VAR_PRIORITY] = "CUDA_TASK_PRIORITY",
    [LB_VAR_LOG_LEVEL] = "LIBCUDA_LOG_LEVEL",
    [LB_VAR_HOSTPID_BROKER] = "LIBVGPU_HOSTPID_BROKER",
    [LB_VAR_FORMAT] = "HAMI_LIMITS_FORMAT",
};

#define MEM_PREFIX "CUDA_DEVICE_MEMORY_LIMIT"
#define SM_PREFIX "CUDA_DEVICE_SM_LIMIT"

const char *lb_var_name(int var, char *buf, size_t size)
{
    if (var == LB_VAR_MEM)
        return MEM_PREFIX;
    if (var == LB_VAR_SM)
        return SM_PREFIX;
    if (var >= LB_VAR_MEM_DEV0 && var < LB_VAR_MEM_DEV0 + LB_MAX_DEVICES) {
        lb_fmt(buf, size, MEM_PREFIX "_%d", var - LB_VAR_MEM_DEV0);
        return buf;
    }
    if (var >= LB_VAR_SM_DEV0 && var < LB_VAR_SM_DEV0 + LB_MAX_DEVICES) {
        lb_fmt(buf, size, SM_PREFIX "_%d", var - LB_VAR_SM_DEV0);
        return buf;
    }
    if (var >= LB_VAR_CACHE && var < LB_VAR_COUNT)
        return k_fixed_names[var];
    return "?";
}

int lb_var_is_memory(int var)
{
    return var >= LB_VAR_MEM && var < LB_VAR_MEM_DEV0 + LB_MAX_DEVICES;
}

int lb_var_lookup(const char *k, size_t n)
{
    static const struct {
        const char *p;
        size_t n;
        int base, dev0;
    } idx[] = {{MEM_PREFIX, sizeof MEM_PREFIX - 1, LB_VAR_MEM, LB_VAR_MEM_DEV0},
               {SM_PREFIX, sizeof SM_PREFIX - 1, LB_VAR_SM, LB_VAR_SM_DEV0}};
    for (size_t i = 0; i < 2; i++) {
        if (n < idx[i].n || memcmp(k, idx[i].p, idx[i].n) != 0)
            continue;
        if (n == idx[i].n)
            return idx[i].base;
        if (k[idx[i].n] != '_' || n == idx[i].n + 1 || n > idx[i].n + 3)
            return -1;
        unsigned v = 0;
        for (size_t j = idx[i].n + 1; j < n; j++) {
            if (k[j] < '0' || k[j] > '9')
                return -1;
            v = v * 10 + (unsigned)(k[j] - '0');
        }
        /* "_01" is not "_1": HAMi writes plain indexes; anything else is another variable. */
        if ((n == idx[i].n + 3 && k[idx[i].n + 1] == '0') || v >= LB_MAX_DEVICES)
            return -1;
        return idx[i].dev0 + (int)v;
    }
    for (int v = LB_VAR_CACHE; v < LB_VAR_COUNT; v++)
        if (strlen(k_fixed_names[v]) == n && memcmp(k_fixed_names[v], k, n) == 0)
            return v;
    return -1;
}

void lb_diag_add(struct lb_diags *dg, int level, uint32_t line, int skipped_line, const char *fmt, ...)
{
    if (!dg)
        return;
    struct lb_diag *d = NULL;
    if (dg->n < LB_MAX_DIAGS) {
        d = &dg->d[dg->n++];
    } else {
        /* Full: a more severe diagnostic replaces the last less severe one (an ERROR must not be
         * lost behind a flood of repeated-key warnings). */
        dg->dropped++;
        for (uint32_t i = dg->n; i-- > 0 && !d;)
            if (dg->d[i].level > level)
                d = &dg->d[i];
        if (!d)
            return;
    }
    d->level = (uint8_t)level;
    d->line = line;
    d->skipped_line = (uint8_t)skipped_line;
    va_list ap;
    va_start(ap, fmt);
    lb_vfmt(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
}

int lb_parse_memory(const char *s, size_t n, uint64_t *out)
{
    uint64_t mult = 1;
    if (n == 0)
        return -1;
    switch (s[n - 1]) {
    case 'k': case 'K': mult = 1ULL << 10; n--; break;
    case 'm': case 'M': mult = 1ULL << 20; n--; break;
    case 'g': case 'G': mult = 1ULL << 30; n--; break;
    default: break;
    }
    if (n == 0)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (v > UINT64_MAX / mult)
        return -1;
    *out = v * mult;
    return 0;
}

uint64_t lb_parse_memory_legacy(const char *s)
{
    if (!s || !*s)
        return 0;
    size_t n = strlen(s);
    uint64_t scalar = 1;
    switch (s[n - 1]) {
    case 'G': case 'g': scalar = 1ULL << 30; break;
    case 'M': case 'm': scalar = 1ULL << 20; break;
    case 'K': case 'k': scalar = 1ULL << 10; break;
    default: break;
    }
    unsigned long raw = strtoul(s, NULL, 0); /* base 0 and trailing junk: as v2.10 does */
    uint64_t scaled = (uint64_t)raw * scalar;
    if (scalar && scaled / scalar != raw)
        return 0; /* v2.10 logs and returns 0, i.e. unlimited */
    return scaled;
}

