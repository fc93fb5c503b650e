/*
 * The pure limits loader (see limits.h). Rules (docs/hamicore.md, "Reader grammar"), shared with
 * the Go reader in plugin/limitsfile through testdata/limits:
 *   - a line is the bytes before an LF; one trailing CR is dropped (CRLF-edited files);
 *   - skipped, with an ERROR naming the line number: a last line without LF (a torn write:
 *     "..._LIMIT_0=30" would otherwise mean 30 bytes), a line of 4096 bytes or more, an empty
 *     line, a line holding NUL, CR or another control byte, a line without '=', a key that is
 *     not [A-Za-z_][A-Za-z0-9_]*, and a memory variable whose value is not a memory value;
 *   - reading always continues with the next line.
 */
#include "limits.h"

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
    [LB_VAR_DISABLE_CONTROL] = "CUDA_DISABLE_CONTROL",
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

/* Key → variable id; -1 for a key libvgpu does not read (incl. indexes >= 16). */
static int var_lookup(const char *k, size_t n)
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

/* Printable, length-limited copy of untrusted bytes for a message. */
static const char *sanitize(const char *s, size_t n, char *buf, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f) {
            buf[o++] = (char)c;
        } else {
            buf[o++] = '\\';
            buf[o++] = 'x';
            buf[o++] = "0123456789abcdef"[c >> 4];
            buf[o++] = "0123456789abcdef"[c & 15];
        }
        if (i == 47 && n > 48) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
    }
    buf[o] = '\0';
    return buf;
}

void lb_reader_init(struct lb_reader *r, struct lb_file_vars *fv, struct lb_diags *dg, const char *origin,
                    int legacy)
{
    memset(fv, 0, offsetof(struct lb_file_vars, pool));
    r->fv = fv;
    r->dg = dg;
    r->origin = origin ? origin : "limits file";
    r->len = 0;
    r->overlong = 0;
    r->legacy = (uint8_t)!!legacy;
    r->stopped = 0;
}

static int pool_put(struct lb_file_vars *fv, const char *s, size_t n, uint32_t *off)
{
    if (n > LB_POOL_SIZE - fv->pool_used)
        return -1;
    memcpy(fv->pool + fv->pool_used, s, n);
    *off = fv->pool_used;
    fv->pool_used += (uint32_t)n;
    return 0;
}

#define SKIP(...)                                                                                  \
    do {                                                                                           \
        fv->skipped++;                                                                             \
        lb_diag_add(r->dg, LB_LOG_ERROR, no, 1, __VA_ARGS__);                                      \
        return;                                                                                    \
    } while (0)

static void store(struct lb_reader *r, uint32_t no, const char *k, size_t kn, const char *v, size_t vn)
{
    struct lb_file_vars *fv = r->fv;
    char kb[200];
    int var = var_lookup(k, kn);
    struct lb_val *slot = NULL;
    if (var >= 0) {
        slot = &fv->var[var];
        if (lb_var_is_memory(var) && !r->legacy) {
            uint64_t bytes;
            if (lb_parse_memory(v, vn, &bytes) != 0) {
                slot->rejected = 1;
                char vb[200];
                SKIP("%s line %u: %s=%s is not a memory value ([0-9]+[kKmMgG]?, at most 2^64-1 bytes); "
                     "line skipped",
                     r->origin, no, sanitize(k, kn, kb, sizeof kb), sanitize(v, vn, vb, sizeof vb));
            }
        }
    } else {
        for (uint32_t i = 0; i < fv->nother && !slot; i++)
            if (fv->other[i].klen == kn && memcmp(fv->pool + fv->other[i].koff, k, kn) == 0)
                slot = &fv->other[i].v;
        if (!slot) {
            if (fv->nother >= LB_MAX_OTHER) {
                lb_diag_add(r->dg, LB_LOG_INFO, no, 0, "%s line %u: %s is not read by libvgpu; ignored", r->origin,
                            no, sanitize(k, kn, kb, sizeof kb));
                return;
            }
            uint32_t koff;
            if (pool_put(fv, k, kn, &koff) != 0)
                SKIP("%s line %u: more than %d bytes of values in the file; line skipped", r->origin, no,
                     LB_POOL_SIZE);
            fv->other[fv->nother].koff = koff;
            fv->other[fv->nother].klen = (uint32_t)kn;
            slot = &fv->other[fv->nother++].v;
            lb_diag_add(r->dg, LB_LOG_DEBUG, no, 0, "%s line %u: %s is not read by libvgpu; ignored", r->origin,
                        no, sanitize(k, kn, kb, sizeof kb));
        }
    }
    uint32_t off;
    if (slot->set && vn <= slot->len) {
        memcpy(fv->pool + slot->off, v, vn); /* a repeated key reuses its space */
        off = slot->off;
    } else if (pool_put(fv, v, vn, &off) != 0)
        SKIP("%s line %u: more than %d bytes of values in the file; line skipped", r->origin, no, LB_POOL_SIZE);
    if (slot->set)
        lb_diag_add(r->dg, LB_LOG_WARN, no, 0, "%s line %u: %s repeats line %u; the later value is used", r->origin,
                    no, sanitize(k, kn, kb, sizeof kb), slot->line);
    slot->off = off;
    slot->len = (uint32_t)vn;
    slot->line = no;
    slot->set = 1;
}

static void line_done(struct lb_reader *r, int terminated)
{
    struct lb_file_vars *fv = r->fv;
    uint32_t no = ++fv->lines;
    const char *l = r->line;
    size_t n = r->len;
    int overlong = r->overlong;
    r->len = 0;
    r->overlong = 0;

    if (r->legacy) {
        /* v2.10: fgets, strip "\n" only, stop at the first line without '='. */
        const char *eq = overlong ? NULL : memchr(l, '=', n);
        if (!eq || memchr(l, '\0', n)) {
            r->stopped = 1;
            lb_diag_add(r->dg, LB_LOG_DEBUG, no, 0, "%s line %u: no '='; the v2.10 reader stops here", r->origin,
                        no);
            return;
        }
        if (eq == l)
            return; /* setenv("") fails silently in v2.10 */
        store(r, no, l, (size_t)(eq - l), eq + 1, n - (size_t)(eq - l) - 1);
        return;
    }

    if (!terminated)
        SKIP("%s line %u: the file does not end with LF (a truncated write?); line skipped", r->origin, no);
    if (overlong)
        SKIP("%s line %u: longer than %d bytes; line skipped", r->origin, no, LB_LINE_MAX - 1);
    if (n && l[n - 1] == '\r')
        n--;
    if (n == 0)
        SKIP("%s line %u: empty line; skipped", r->origin, no);
    const char *eq = NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)l[i];
        if (c < 0x20 || c == 0x7f)
            SKIP("%s line %u: contains the non-printable byte 0x%x%s; line skipped", r->origin, no, c,
                 c == 0 ? " (NUL)" : c == '\r' ? " (CR)" : "");
        if (c == '=' && !eq)
            eq = l + i;
    }
    if (!eq)
        SKIP("%s line %u: no '=' (expected KEY=VALUE); line skipped", r->origin, no);
    size_t kn = (size_t)(eq - l);
    if (kn == 0)
        SKIP("%s line %u: empty key; line skipped", r->origin, no);
    for (size_t i = 0; i < kn; i++) {
        char c = l[i];
        int ok = c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9');
        if (!ok) {
            char kb[200];
            SKIP("%s line %u: key \"%s\" is not a variable name; line skipped", r->origin, no,
                 sanitize(l, kn, kb, sizeof kb));
        }
    }
    store(r, no, l, kn, eq + 1, n - kn - 1);
}

void lb_reader_feed(struct lb_reader *r, const char *p, size_t n)
{
    while (n && !r->stopped) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl ? (size_t)(nl - p) : n;
        /* Keep at most LB_LINE_MAX - 1 bytes; anything longer is only counted as over-long. */
        size_t room = (LB_LINE_MAX - 1) - r->len;
        if (take > room) {
            r->overlong = 1;
            memcpy(r->line + r->len, p, room);
            r->len += (uint32_t)room;
        } else {
            memcpy(r->line + r->len, p, take);
            r->len += (uint32_t)take;
        }
        if (!nl)
            return;
        p += take + 1;
        n -= take + 1;
        line_done(r, 1);
    }
}

void lb_reader_finish(struct lb_reader *r)
{
    if (!r->stopped && (r->len || r->overlong))
        line_done(r, 0);
}

/* ---- resolution ---------------------------------------------------------------------------- */

struct src_val {
    const char *s; /* NUL-terminated copy lives in buf */
    uint8_t src;
    uint32_t line;
    char buf[LB_LINE_MAX];
};

static int get_val(const struct lb_file_vars *fv, lb_getenv_fn env, void *ctx, int var, struct src_val *out)
{
    char nb[64];
    out->s = NULL;
    out->src = LB_SRC_NONE;
    out->line = 0;
    if (fv && fv->var[var].set) {
        const struct lb_val *v = &fv->var[var];
        memcpy(out->buf, fv->pool + v->off, v->len);
        out->buf[v->len] = '\0';
        out->s = out->buf;
        out->src = LB_SRC_FILE;
        out->line = v->line;
        return 1;
    }
    const char *e = env ? env(lb_var_name(var, nb, sizeof nb), ctx) : NULL;
    if (e) {
        size_t n = strnlen(e, LB_LINE_MAX - 1);
        memcpy(out->buf, e, n);
        out->buf[n] = '\0';
        out->s = out->buf;
        out->src = LB_SRC_ENV;
        return 1;
    }
    return 0;
}

static const char *src_name(const struct src_val *v, const char *origin, char *buf, size_t size)
{
    if (v->src == LB_SRC_FILE)
        lb_fmt(buf, size, "%s line %u", origin, v->line);
    else
        lb_fmt(buf, size, "the environment");
    return buf;
}

/* Memory limit variable → state: 0 absent, 1 valid (*bytes), 2 rejected everywhere. */
static int mem_var(const struct lb_file_vars *fv, lb_getenv_fn env, void *ctx, int var, int legacy,
                   uint64_t *bytes, uint8_t *src, struct lb_diags *dg, struct src_val *v)
{
    char nb[64], sb[128];
    const char *name = lb_var_name(var, nb, sizeof nb);
    if (legacy) {
        if (!get_val(NULL, env, ctx, var, v))
            return 0;
        *bytes = lb_parse_memory_legacy(v->s);
        *src = LB_SRC_ENV;
        return 1;
    }
    int file_rejected = fv && fv->var[var].rejected && !fv->var[var].set;
    if (get_val(fv, env, ctx, var, v)) {
        if (lb_parse_memory(v->s, strlen(v->s), bytes) == 0) {
            *src = v->src;
            if (file_rejected)
                lb_diag_add(dg, LB_LOG_WARN, 0, 0,
                            "%s: the limits file's value was rejected; using the value from the environment", name);
            return 1;
        }
        /* Only the environment can get here: file lines with bad values were skipped. */
        lb_diag_add(dg, LB_LOG_ERROR, v->line, 0, "%s=%s from %s is not a memory value ([0-9]+[kKmMgG]?)", name,
                    v->s, src_name(v, "?", sb, sizeof sb));
        return 2;
    }
    return file_rejected ? 2 : 0;
}

static int parse_uint(const char *s, uint32_t max, uint32_t *out)
{
    uint64_t v = 0;
    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > max)
            return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int parse_bool(const char *s, uint8_t *out)
{
    if (!strcmp(s, "true") || !strcmp(s, "TRUE") || !strcmp(s, "True") || !strcmp(s, "1")) {
        *out = 1;
        return 0;
    }
    if (!strcmp(s, "false") || !strcmp(s, "FALSE") || !strcmp(s, "False") || !strcmp(s, "0") || !*s) {
        *out = 0;
        return 0;
    }
    return -1;
}

void lb_resolve(const struct lb_file_vars *fv, lb_getenv_fn env, void *ctx, int legacy, struct lb_config *cfg,
                struct lb_diags *dg)
{
    /* Static scratch would break purity and thread-safety; one value buffer on the stack (4 KiB). */
    struct src_val v;
    char nb[64], sb[128];
    const char *origin = "/overrideEnv";
    if (legacy)
        fv = NULL; /* v2.10 reads the environment here; its file is applied later (NVML init) */

    memset(cfg, 0, sizeof *cfg);

    /* Memory: a per-device value > 0 wins, else the global one; "0"/"0m" means no limit. A value
     * rejected everywhere refuses allocations on that device (limit 0) instead of lifting the cap. */
    uint64_t gbytes = 0;
    uint8_t gsrc = LB_SRC_NONE;
    int gstate = mem_var(fv, env, ctx, LB_VAR_MEM, legacy, &gbytes, &gsrc, dg, &v);
    for (int i = 0; i < LB_MAX_DEVICES; i++) {
        uint64_t b = 0;
        uint8_t s = LB_SRC_NONE;
        int st = mem_var(fv, env, ctx, LB_VAR_MEM_DEV0 + i, legacy, &b, &s, dg, &v);
        if (st == 1 && b > 0) {
            cfg->mem_limit[i] = b;
            cfg->mem_src[i] = s;
        } else if (st == 2) {
            cfg->mem_limit[i] = 0;
            cfg->mem_src[i] = LB_SRC_NONE;
            lb_diag_add(dg, LB_LOG_ERROR, 0, 0, "%s has no valid value; device %d refuses every allocation",
                        lb_var_name(LB_VAR_MEM_DEV0 + i, nb, sizeof nb), i);
        } else if (gstate == 1 && gbytes > 0) {
            cfg->mem_limit[i] = gbytes;
            cfg->mem_src[i] = gsrc;
        } else if (gstate == 2) {
            cfg->mem_limit[i] = 0;
            cfg->mem_src[i] = LB_SRC_NONE;
        } else {
            cfg->mem_limit[i] = LB_MEM_UNLIMITED;
            cfg->mem_src[i] = (st == 1 || gstate == 1) ? (st == 1 ? s : gsrc) : LB_SRC_NONE;
        }
    }
    if (gstate == 2)
        lb_diag_add(dg, LB_LOG_ERROR, 0, 0,
                    MEM_PREFIX " has no valid value; devices without their own limit refuse every allocation");

    /* SM limit: percent 0..100, 0 = 100 = no compute limit. */
    uint32_t gsm = 100;
    for (int var = LB_VAR_SM; var < LB_VAR_SM_DEV0 + LB_MAX_DEVICES; var++) {
        uint32_t pct = 0;
        if (!get_val(fv, env, ctx, var, &v))
            pct = var == LB_VAR_SM ? 100 : gsm;
        else if (legacy) {
            uint64_t x = lb_parse_memory_legacy(v.s);
            pct = x == 0 || x > 100 ? 100 : (uint32_t)x;
        } else if (parse_uint(v.s, 100, &pct) != 0) {
            lb_diag_add(dg, LB_LOG_ERROR, v.line, 0, "%s=%s from %s is not a percentage 0..100; no compute limit",
                        lb_var_name(var, nb, sizeof nb), v.s, src_name(&v, origin, sb, sizeof sb));
            pct = 100;
        }
        if (pct == 0)
            pct = 100;
        if (var == LB_VAR_SM)
            gsm = pct;
        else
            cfg->sm_limit[var - LB_VAR_SM_DEV0] = pct;
    }

    if (get_val(fv, env, ctx, LB_VAR_CACHE, &v) && v.s[0]) {
        memcpy(cfg->cache_path, v.s, strlen(v.s) + 1);
        cfg->cache_src = v.src;
        if (v.s[0] != '/')
            lb_diag_add(dg, LB_LOG_WARN, v.line, 0, "CUDA_DEVICE_MEMORY_SHARED_CACHE=%s from %s is a relative path",
                        v.s, src_name(&v, origin, sb, sizeof sb));
    } else {
        memcpy(cfg->cache_path, LB_DEFAULT_CACHE, sizeof LB_DEFAULT_CACHE);
        cfg->cache_src = LB_SRC_DEFAULT;
    }

    if (get_val(fv, env, ctx, LB_VAR_OVERSUBSCRIBE, &v) && parse_bool(v.s, &cfg->oversubscribe) != 0)
        lb_diag_add(dg, LB_LOG_WARN, v.line, 0, "CUDA_OVERSUBSCRIBE=%s from %s is not true/false; using false", v.s,
                    src_name(&v, origin, sb, sizeof sb));

    cfg->policy = LB_POLICY_DEFAULT;
    if (get_val(fv, env, ctx, LB_VAR_POLICY, &v)) {
        if (!strcmp(v.s, "force") || !strcmp(v.s, "FORCE"))
            cfg->policy = LB_POLICY_FORCE;
        else if (!strcmp(v.s, "disable") || !strcmp(v.s, "DISABLE"))
            cfg->policy = LB_POLICY_DISABLE;
        else if (strcmp(v.s, "default") && strcmp(v.s, "DEFAULT") && v.s[0])
            lb_diag_add(dg, LB_LOG_WARN, v.line, 0,
                        "GPU_CORE_UTILIZATION_POLICY=%s from %s is not force/disable/default; using default", v.s,
                        src_name(&v, origin, sb, sizeof sb));
    }

    cfg->priority = 1;
    if (get_val(fv, env, ctx, LB_VAR_PRIORITY, &v)) {
        uint32_t p;
        const char *s = v.s[0] == '-' ? v.s + 1 : v.s;
        if (parse_uint(s, 1000000, &p) == 0)
            cfg->priority = v.s[0] == '-' ? -(int32_t)p : (int32_t)p;
        else
            lb_diag_add(dg, LB_LOG_WARN, v.line, 0, "CUDA_TASK_PRIORITY=%s from %s is not an integer; using 1", v.s,
                        src_name(&v, origin, sb, sizeof sb));
    }

    cfg->log_level = LB_LOG_DEFAULT;
    if (get_val(fv, env, ctx, LB_VAR_LOG_LEVEL, &v)) {
        uint32_t lv;
        if (parse_uint(v.s, 1000, &lv) == 0)
            cfg->log_level = (int8_t)(lv > LB_LOG_DEBUG ? LB_LOG_DEBUG : lv);
        else
            lb_diag_add(dg, LB_LOG_WARN, v.line, 0, "LIBCUDA_LOG_LEVEL=%s from %s is not 0..4; using %d", v.s,
                        src_name(&v, origin, sb, sizeof sb), LB_LOG_DEFAULT);
    }

    if (get_val(fv, env, ctx, LB_VAR_HOSTPID_BROKER, &v)) {
        cfg->hostpid_broker = !strcmp(v.s, "1");
        if (!cfg->hostpid_broker && strcmp(v.s, "0") && v.s[0])
            lb_diag_add(dg, LB_LOG_WARN, v.line, 0, "LIBVGPU_HOSTPID_BROKER=%s from %s is not 1 or 0; using 0", v.s,
                        src_name(&v, origin, sb, sizeof sb));
    }

    if (get_val(fv, env, ctx, LB_VAR_DISABLE_CONTROL, &v) && parse_bool(v.s, &cfg->disable_control) != 0)
        lb_diag_add(dg, LB_LOG_WARN, v.line, 0, "CUDA_DISABLE_CONTROL=%s from %s is not true/false; using false", v.s,
                    src_name(&v, origin, sb, sizeof sb));

    if (get_val(fv, env, ctx, LB_VAR_FORMAT, &v)) {
        uint32_t f;
        if (parse_uint(v.s, 1000000, &f) != 0 || f == 0)
            lb_diag_add(dg, LB_LOG_WARN, v.line, 0, "HAMI_LIMITS_FORMAT=%s from %s is not a format number; read as 1",
                        v.s, src_name(&v, origin, sb, sizeof sb));
        else {
            cfg->format = f;
            if (f > 1)
                lb_diag_add(dg, LB_LOG_WARN, v.line, 0,
                            "HAMI_LIMITS_FORMAT=%u from %s is newer than this library (1); read as format 1", f,
                            src_name(&v, origin, sb, sizeof sb));
        }
    }
}

void lb_load(const char *buf, size_t len, const char *origin, lb_getenv_fn env, void *ctx,
             struct lb_file_vars *fv, struct lb_config *cfg, struct lb_diags *dg)
{
    struct lb_reader r;
    int have = buf != NULL;
    if (have) {
        lb_reader_init(&r, fv, dg, origin, 0);
        lb_reader_feed(&r, buf, len);
        lb_reader_finish(&r);
    }
    lb_resolve(have ? fv : NULL, env, ctx, 0, cfg, dg);
}

/* ---- canonical form (test vectors) --------------------------------------------------------- */

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
