/* The resolver: what one file (or none) and the environment make of the configuration. */
#include "limitsfile.h"

#include <string.h>

#include "fmt.h"

struct src_val {
    const char *s; /* NUL-terminated copy lives in buf */
    uint8_t src;
    uint32_t line;
    char buf[LB_LINE_MAX];
};

static int from_env(lb_getenv_fn env, void *ctx, int var, struct src_val *out)
{
    char nb[64];
    const char *e = env ? env(lb_var_name(var, nb, sizeof nb), ctx) : NULL;
    if (!e)
        return 0;
    size_t n = strnlen(e, LB_LINE_MAX - 1);
    memcpy(out->buf, e, n);
    out->buf[n] = '\0';
    out->s = out->buf;
    out->src = LB_SRC_ENV;
    return 1;
}

/* Where a variable's value comes from. With a file (file mode) the file alone governs every
 * variable but the log level: the environment is what a process controls, so it must not loosen,
 * fill in or switch off anything the file governs, and a key the file lacks takes the library's
 * default. The log level changes only what the process itself is told, so its own environment may
 * still set it and wins (a user raises it to debug a login session). Without a file (env mode)
 * everything comes from the environment, as upstream. */
static int get_val(const struct lb_file_vars *fv, lb_getenv_fn env, void *ctx, int var, struct src_val *out)
{
    out->s = NULL;
    out->src = LB_SRC_NONE;
    out->line = 0;
    if (var == LB_VAR_LOG_LEVEL && from_env(env, ctx, var, out))
        return 1;
    if (fv && fv->var[var].set) {
        const struct lb_val *v = &fv->var[var];
        memcpy(out->buf, fv->pool + v->off, v->len);
        out->buf[v->len] = '\0';
        out->s = out->buf;
        out->src = LB_SRC_FILE;
        out->line = v->line;
        return 1;
    }
    if (fv)
        return 0;
    return from_env(env, ctx, var, out);
}

/* File mode: say which environment values were ignored (INFO: the process asked for something the
 * file governs; nothing is wrong with the container). */
static void report_ignored_env(const struct lb_file_vars *fv, lb_getenv_fn env, void *ctx, struct lb_diags *dg,
                               struct src_val *v)
{
    char nb[64];
    for (int var = 0; var < LB_VAR_COUNT; var++) {
        if (var == LB_VAR_LOG_LEVEL || var == LB_VAR_FORMAT || !from_env(env, ctx, var, v))
            continue;
        const struct lb_val *f = &fv->var[var];
        if (f->set && f->len == strlen(v->s) && memcmp(fv->pool + f->off, v->s, f->len) == 0)
            continue;
        lb_diag_add(dg, LB_LOG_INFO, 0, 0, "%s=%s from the environment is ignored: /overrideEnv governs it%s",
                    lb_var_name(var, nb, sizeof nb), v->s, f->set ? "" : " (absent there: the library's default)");
    }
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

/* One resolution's inputs and scratch: the file's variables (NULL: the environment only), the
 * environment, where diagnostics go, and one value buffer on the stack (static scratch would break
 * purity and thread-safety). */
struct resolver {
    const struct lb_file_vars *fv;
    lb_getenv_fn env;
    void *ctx;
    int legacy;
    struct lb_diags *dg;
    const char *origin;
    struct src_val v;
    char nb[64], sb[128];
};

static void resolve_memory(struct resolver *r, struct lb_config *cfg)
{
    /* Memory: a per-device value > 0 wins, else the global one; "0"/"0m" means no limit. A value
     * rejected everywhere refuses allocations on that device (limit 0) instead of lifting the cap. */
    uint64_t gbytes = 0;
    uint8_t gsrc = LB_SRC_NONE;
    int gstate = mem_var(r->fv, r->env, r->ctx, LB_VAR_MEM, r->legacy, &gbytes, &gsrc, r->dg, &r->v);
    for (int i = 0; i < LB_MAX_DEVICES; i++) {
        uint64_t b = 0;
        uint8_t s = LB_SRC_NONE;
        int st = mem_var(r->fv, r->env, r->ctx, LB_VAR_MEM_DEV0 + i, r->legacy, &b, &s, r->dg, &r->v);
        if (st == 1 && b > 0) {
            cfg->mem_limit[i] = b;
            cfg->mem_src[i] = s;
        } else if (st == 2) {
            cfg->mem_limit[i] = 0;
            cfg->mem_src[i] = LB_SRC_NONE;
            lb_diag_add(r->dg, LB_LOG_ERROR, 0, 0, "%s has no valid value; device %d refuses every allocation",
                        lb_var_name(LB_VAR_MEM_DEV0 + i, r->nb, sizeof r->nb), i);
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
        lb_diag_add(r->dg, LB_LOG_ERROR, 0, 0,
                    "CUDA_DEVICE_MEMORY_LIMIT has no valid value; devices without their own limit refuse every allocation");
}

static void resolve_sm(struct resolver *r, struct lb_config *cfg)
{
    /* SM limit: percent 0..100, 0 = 100 = no compute limit. */
    uint32_t gsm = 100;
    for (int var = LB_VAR_SM; var < LB_VAR_SM_DEV0 + LB_MAX_DEVICES; var++) {
        uint32_t pct = 0;
        if (!get_val(r->fv, r->env, r->ctx, var, &r->v))
            pct = var == LB_VAR_SM ? 100 : gsm;
        else if (r->legacy) {
            uint64_t x = lb_parse_memory_legacy(r->v.s);
            pct = x == 0 || x > 100 ? 100 : (uint32_t)x;
        } else if (parse_uint(r->v.s, 100, &pct) != 0) {
            lb_diag_add(r->dg, LB_LOG_ERROR, r->v.line, 0, "%s=%s from %s is not a percentage 0..100; no compute limit",
                        lb_var_name(var, r->nb, sizeof r->nb), r->v.s,
                        src_name(&r->v, r->origin, r->sb, sizeof r->sb));
            pct = 100;
        }
        if (pct == 0)
            pct = 100;
        if (var == LB_VAR_SM)
            gsm = pct;
        else
            cfg->sm_limit[var - LB_VAR_SM_DEV0] = pct;
    }
}

/* The shared cache, oversubscription, the compute policy and the task priority. */
static void resolve_sharing(struct resolver *r, struct lb_config *cfg)
{
    if (get_val(r->fv, r->env, r->ctx, LB_VAR_CACHE, &r->v) && r->v.s[0]) {
        memcpy(cfg->cache_path, r->v.s, strlen(r->v.s) + 1);
        cfg->cache_src = r->v.src;
        if (r->v.s[0] != '/')
            lb_diag_add(r->dg, LB_LOG_WARN, r->v.line, 0, "CUDA_DEVICE_MEMORY_SHARED_CACHE=%s from %s is a relative path",
                        r->v.s, src_name(&r->v, r->origin, r->sb, sizeof r->sb));
    } else {
        memcpy(cfg->cache_path, LB_DEFAULT_CACHE, sizeof LB_DEFAULT_CACHE);
        cfg->cache_src = LB_SRC_DEFAULT;
    }

    if (get_val(r->fv, r->env, r->ctx, LB_VAR_OVERSUBSCRIBE, &r->v) && parse_bool(r->v.s, &cfg->oversubscribe) != 0)
        lb_diag_add(r->dg, LB_LOG_WARN, r->v.line, 0, "CUDA_OVERSUBSCRIBE=%s from %s is not true/false; using false", r->v.s,
                    src_name(&r->v, r->origin, r->sb, sizeof r->sb));

    cfg->policy = LB_POLICY_DEFAULT;
    if (get_val(r->fv, r->env, r->ctx, LB_VAR_POLICY, &r->v)) {
        if (!strcmp(r->v.s, "force") || !strcmp(r->v.s, "FORCE"))
            cfg->policy = LB_POLICY_FORCE;
        else if (!strcmp(r->v.s, "disable") || !strcmp(r->v.s, "DISABLE"))
            cfg->policy = LB_POLICY_DISABLE;
        else if (strcmp(r->v.s, "default") && strcmp(r->v.s, "DEFAULT") && r->v.s[0])
            lb_diag_add(r->dg, LB_LOG_WARN, r->v.line, 0,
                        "GPU_CORE_UTILIZATION_POLICY=%s from %s is not force/disable/default; using default", r->v.s,
                        src_name(&r->v, r->origin, r->sb, sizeof r->sb));
    }

    cfg->priority = 1;
    if (get_val(r->fv, r->env, r->ctx, LB_VAR_PRIORITY, &r->v)) {
        uint32_t p;
        const char *s = r->v.s[0] == '-' ? r->v.s + 1 : r->v.s;
        if (parse_uint(s, 1000000, &p) == 0)
            cfg->priority = r->v.s[0] == '-' ? -(int32_t)p : (int32_t)p;
        else
            lb_diag_add(r->dg, LB_LOG_WARN, r->v.line, 0, "CUDA_TASK_PRIORITY=%s from %s is not an integer; using 1", r->v.s,
                        src_name(&r->v, r->origin, r->sb, sizeof r->sb));
    }
}

/* The log level, the host-PID broker, what is read elsewhere or not at all, and the format. */
static void resolve_rest(struct resolver *r, struct lb_config *cfg)
{
    cfg->log_level = LB_LOG_DEFAULT;
    if (get_val(r->fv, r->env, r->ctx, LB_VAR_LOG_LEVEL, &r->v)) {
        uint32_t lv;
        if (parse_uint(r->v.s, 1000, &lv) == 0)
            cfg->log_level = (int8_t)(lv > LB_LOG_DEBUG ? LB_LOG_DEBUG : lv);
        else
            lb_diag_add(r->dg, LB_LOG_WARN, r->v.line, 0, "LIBCUDA_LOG_LEVEL=%s from %s is not 0..4; using %d", r->v.s,
                        src_name(&r->v, r->origin, r->sb, sizeof r->sb), LB_LOG_DEFAULT);
    }

    if (get_val(r->fv, r->env, r->ctx, LB_VAR_HOSTPID_BROKER, &r->v)) {
        cfg->hostpid_broker = !strcmp(r->v.s, "1");
        if (!cfg->hostpid_broker && strcmp(r->v.s, "0") && r->v.s[0])
            lb_diag_add(r->dg, LB_LOG_WARN, r->v.line, 0, "LIBVGPU_HOSTPID_BROKER=%s from %s is not 1 or 0; using 0", r->v.s,
                        src_name(&r->v, r->origin, r->sb, sizeof r->sb));
    }

    /* Read by the device plugin from the pod spec (it then leaves out the preload), never here. */
    if (r->env && r->env("CUDA_DISABLE_CONTROL", r->ctx))
        lb_diag_add(r->dg, LB_LOG_INFO, 0, 0,
                    "CUDA_DISABLE_CONTROL is not read by libvgpu (the device plugin reads it from the pod spec); "
                    "limits stay enforced");
    if (r->fv)
        report_ignored_env(r->fv, r->env, r->ctx, r->dg, &r->v);

    if (get_val(r->fv, r->env, r->ctx, LB_VAR_FORMAT, &r->v)) {
        uint32_t f;
        if (parse_uint(r->v.s, 1000000, &f) != 0 || f == 0)
            lb_diag_add(r->dg, LB_LOG_WARN, r->v.line, 0, "HAMI_LIMITS_FORMAT=%s from %s is not a format number; read as 1",
                        r->v.s, src_name(&r->v, r->origin, r->sb, sizeof r->sb));
        else {
            cfg->format = f;
            if (f > 1)
                lb_diag_add(r->dg, LB_LOG_WARN, r->v.line, 0,
                            "HAMI_LIMITS_FORMAT=%u from %s is newer than this library (1); read as format 1", f,
                            src_name(&r->v, r->origin, r->sb, sizeof r->sb));
        }
    }
}

void lb_resolve(const struct lb_file_vars *fv, lb_getenv_fn env, void *ctx, int legacy, struct lb_config *cfg,
                struct lb_diags *dg)
{
    /* v2.10 reads the environment here; its file is applied later (NVML init) */
    struct resolver r = {.fv = legacy ? NULL : fv, .env = env, .ctx = ctx, .legacy = legacy, .dg = dg,
                         .origin = "/overrideEnv"};
    memset(cfg, 0, sizeof *cfg);
    resolve_memory(&r, cfg);
    resolve_sm(&r, cfg);
    resolve_sharing(&r, cfg);
    resolve_rest(&r, cfg);
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
