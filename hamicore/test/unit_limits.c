/* The limits loader: shared vectors (testdata/limits), grammar tables, precedence, diagnostics
 * (the file reader's I/O edge cases and the v2.10 reader: unit_limits_file.c). */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "limitsfile.h"
#include "unit.h"

static struct lb_file_vars fv;
static struct lb_config cfg;
static struct lb_diags dg;
static char canon[1 << 16];

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    b[got] = '\0';
    if (len)
        *len = got;
    return b;
}

/* A fake environment: "K=V" strings. */
struct fenv {
    const char *kv[64];
};
static const char *fenv_get(const char *name, void *ctx)
{
    struct fenv *e = ctx;
    size_t n = strlen(name);
    for (int i = 0; e && e->kv[i]; i++)
        if (!strncmp(e->kv[i], name, n) && e->kv[i][n] == '=')
            return e->kv[i] + n + 1;
    return NULL;
}

static void load(const char *buf, size_t len, struct fenv *env)
{
    memset(&dg, 0, sizeof dg);
    lb_load(buf, len, "/overrideEnv", fenv_get, env, &fv, &cfg, &dg);
}

static void skipped_lines(char *out, size_t size)
{
    size_t o = 0;
    out[0] = '\0';
    for (uint32_t i = 0; i < dg.n; i++)
        if (dg.d[i].skipped_line)
            o += (size_t)snprintf(out + o, size - o, "%u\n", dg.d[i].line);
}

/* Feed in chunks of `step` bytes: the result must not depend on how reads split the file. */
static void load_chunked(const char *buf, size_t len, size_t step)
{
    struct lb_reader r;
    memset(&dg, 0, sizeof dg);
    lb_reader_init(&r, &fv, &dg, "/overrideEnv", 0);
    for (size_t off = 0; off < len; off += step)
        lb_reader_feed(&r, buf + off, len - off < step ? len - off : step);
    lb_reader_finish(&r);
}

/* testdata/limits/hostile.env: what a process sets to loosen its limits. Every vector's file is
 * resolved under it; resolved.env says what the library enforces. */
static struct fenv hostile;
static char *hostile_buf;

static void load_hostile(void)
{
    if (hostile_buf)
        return;
    char p[1024];
    snprintf(p, sizeof p, "%s/hostile.env", unit_vectors_dir);
    hostile_buf = slurp(p, NULL);
    if (!hostile_buf) {
        unit_fail(__FILE__, __LINE__, "%s missing", p);
        return;
    }
    int n = 0;
    for (char *l = strtok(hostile_buf, "\n"); l && n < 63; l = strtok(NULL, "\n"))
        hostile.kv[n++] = l;
    hostile.kv[n] = NULL;
}

static void check_resolved(const char *dir, const char *name, const char *limits, size_t len)
{
    char p[2048];
    load_hostile();
    load(limits, len, &hostile);
    lb_config_canonical(&cfg, canon, sizeof canon);
    snprintf(p, sizeof p, "%s/%s/resolved.env", dir, name);
    if (getenv("LB_UPDATE_VECTORS"))
        unit_write_file(p, canon, strlen(canon));
    char *want = slurp(p, NULL);
    if (!want || strcmp(canon, want) != 0)
        unit_fail(__FILE__, __LINE__, "%s/%s: resolved.env (under hostile.env) differs\n--- got\n%s--- want\n%s", dir,
                  name, canon, want ? want : "(missing)");
    free(want);
    /* Independent of the recorded file: with the file present, the hostile environment changes
     * nothing but the log level — the same file with no environment resolves to the same. */
    static char quiet[1 << 16];
    struct lb_config hostile_cfg = cfg;
    load(limits, len, NULL);
    cfg.log_level = hostile_cfg.log_level;
    lb_config_canonical(&cfg, quiet, sizeof quiet);
    if (strcmp(canon, quiet) != 0)
        unit_fail(__FILE__, __LINE__, "%s/%s: hostile.env changed the resolution\n--- hostile\n%s--- no environment\n%s",
                  dir, name, canon, quiet);
}

static void run_vectors(const char *kind)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", unit_vectors_dir, kind);
    DIR *d = opendir(dir);
    if (!d) {
        if (!strcmp(kind, "valid"))
            unit_fail(__FILE__, __LINE__, "no vectors in %s", dir);
        return;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[2048];
        size_t len;
        snprintf(p, sizeof p, "%s/%s/limits", dir, e->d_name);
        char *limits = slurp(p, &len);
        if (!limits)
            continue; /* the writer's vectors may exist before their files */
        snprintf(p, sizeof p, "%s/%s/parsed.env", dir, e->d_name);
        char *want = slurp(p, NULL);
        snprintf(p, sizeof p, "%s/%s/skipped", dir, e->d_name);
        char *want_skip = slurp(p, NULL);
        n++;
        for (size_t step = 0; step < 3; step++) {
            size_t chunk = step == 0 ? len + 1 : step == 1 ? 1 : 7;
            load_chunked(limits, len, chunk ? chunk : 1);
            lb_file_vars_canonical(&fv, canon, sizeof canon);
            if (!want || strcmp(canon, want) != 0)
                unit_fail(__FILE__, __LINE__, "%s/%s (chunk %zu): parsed.env differs\n--- got\n%s--- want\n%s", kind,
                          e->d_name, chunk, canon, want ? want : "(missing)");
            char got_skip[4096];
            skipped_lines(got_skip, sizeof got_skip);
            const char *ws = want_skip ? want_skip : "";
            if (strcmp(got_skip, ws) != 0)
                unit_fail(__FILE__, __LINE__, "%s/%s (chunk %zu): skipped lines\n--- got\n%s--- want\n%s", kind,
                          e->d_name, chunk, got_skip, ws);
        }
        check_resolved(dir, e->d_name, limits, len);
        free(limits);
        free(want);
        free(want_skip);
    }
    closedir(d);
    if (n == 0 && !strcmp(kind, "malformed"))
        unit_fail(__FILE__, __LINE__, "no malformed vectors");
    printf("    %d %s vectors\n", n, kind);
}

static void test_valid_vectors(void) { run_vectors("valid"); }
static void test_malformed_vectors(void) { run_vectors("malformed"); }

static void test_memory_grammar(void)
{
    static const struct {
        const char *in;
        int ok;
        uint64_t want;
    } t[] = {
        {"3000m", 1, 3000ULL << 20}, {"3000M", 1, 3000ULL << 20}, {"3g", 1, 3ULL << 30}, {"3G", 1, 3ULL << 30},
        {"512k", 1, 512ULL << 10}, {"512K", 1, 512ULL << 10}, {"1073741824", 1, 1073741824ULL}, {"0", 1, 0},
        {"0m", 1, 0}, {"0100m", 1, 100ULL << 20} /* decimal, not octal */, {"18446744073709551615", 1, UINT64_MAX},
        {"17179869183g", 1, 17179869183ULL << 30},
        {"", 0, 0}, {"m", 0, 0}, {"3000mb", 0, 0}, {"3000 m", 0, 0}, {" 3000m", 0, 0}, {"3000m ", 0, 0},
        {"-1", 0, 0}, {"+1", 0, 0}, {"0x10", 0, 0}, {"1.5g", 0, 0}, {"3000m\r", 0, 0}, {"3t", 0, 0},
        {"18446744073709551616", 0, 0}, {"17179869184g", 0, 0}, {"18014398509481984k", 0, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        uint64_t v = 12345;
        int r = lb_parse_memory(t[i].in, strlen(t[i].in), &v);
        if ((r == 0) != t[i].ok || (t[i].ok && v != t[i].want))
            unit_fail(__FILE__, __LINE__, "lb_parse_memory(\"%s\") = %d, %llu", t[i].in, r, (unsigned long long)v);
    }
}

static void test_memory_grammar_legacy(void)
{
    CHECK_U64(lb_parse_memory_legacy("3000m"), 3000ULL << 20);
    CHECK_U64(lb_parse_memory_legacy("3000m\r"), 3000); /* the CRLF trap of v2.10 */
    CHECK_U64(lb_parse_memory_legacy("0100m"), 64ULL << 20); /* octal */
    CHECK_U64(lb_parse_memory_legacy("0x10"), 16);
    CHECK_U64(lb_parse_memory_legacy("3000mb"), 3000);
    CHECK_U64(lb_parse_memory_legacy(""), 0);
}

static void test_file_beats_environment(void)
{
    const char *file = "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\nCUDA_DEVICE_MEMORY_SHARED_CACHE=/pod/usage.cache\n";
    struct fenv env = {{"CUDA_DEVICE_MEMORY_LIMIT_0=5000m", "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/other.cache",
                        "CUDA_DEVICE_SM_LIMIT=40", NULL}};
    load(file, strlen(file), &env);
    CHECK_U64(cfg.mem_limit[0], 3000ULL << 20);
    CHECK_U64(cfg.mem_src[0], LB_SRC_FILE);
    CHECK_STR(cfg.cache_path, "/pod/usage.cache");
    CHECK_U64(cfg.sm_limit[0], 100); /* only in the environment: the file governs, default applies */
    CHECK_U64(cfg.mem_limit[1], LB_MEM_UNLIMITED);
}

/* The one key a process may still set itself in file mode: its log level, which wins over the
 * file's (it changes only what that process is told). */
static void test_log_level_from_environment(void)
{
    const char *file = "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\nLIBCUDA_LOG_LEVEL=1\n";
    struct fenv env = {{"LIBCUDA_LOG_LEVEL=4", "GPU_CORE_UTILIZATION_POLICY=disable", "CUDA_DISABLE_CONTROL=true", NULL}};
    load(file, strlen(file), &env);
    CHECK(cfg.log_level == 4);
    CHECK(cfg.policy == LB_POLICY_DEFAULT);
    int policy = 0, control = 0;
    for (uint32_t i = 0; i < dg.n; i++) {
        policy |= dg.d[i].level == LB_LOG_INFO && strstr(dg.d[i].msg, "GPU_CORE_UTILIZATION_POLICY=disable") &&
                  strstr(dg.d[i].msg, "ignored");
        control |= dg.d[i].level == LB_LOG_INFO && strstr(dg.d[i].msg, "CUDA_DISABLE_CONTROL") != NULL;
    }
    CHECK(policy);
    CHECK(control);
    struct fenv none = {{NULL}};
    load(file, strlen(file), &none);
    CHECK(cfg.log_level == 1);
}

static void test_absent_file_uses_environment(void)
{
    struct fenv env = {{"CUDA_DEVICE_MEMORY_LIMIT_0=5000m", "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/other.cache", NULL}};
    load(NULL, 0, &env);
    CHECK_U64(cfg.mem_limit[0], 5000ULL << 20);
    CHECK_U64(cfg.mem_src[0], LB_SRC_ENV);
    CHECK_STR(cfg.cache_path, "/tmp/other.cache");
    /* Reading the real (compile-time) path's stand-in: absent is INFO, not an error. */
    char p[1024];
    snprintf(p, sizeof p, "%s/absent", unit_tmp_dir);
    memset(&dg, 0, sizeof dg);
    CHECK(lb_read_limits_file(p, &fv, &dg, 0) == 0);
    CHECK(dg.n == 1 && dg.d[0].level == LB_LOG_INFO && strstr(dg.d[0].msg, "absent"));
}

static void test_no_file_no_env_defaults(void)
{
    load(NULL, 0, NULL);
    for (int i = 0; i < LB_MAX_DEVICES; i++) {
        CHECK_U64(cfg.mem_limit[i], LB_MEM_UNLIMITED);
        CHECK_U64(cfg.sm_limit[i], 100);
    }
    CHECK_STR(cfg.cache_path, "/tmp/cudevshr.cache");
    CHECK(cfg.log_level == LB_LOG_WARN);
    CHECK(cfg.priority == 1);
    CHECK(dg.n == 0);
}

static void test_malformed_lines_skipped_and_following_apply(void)
{
    static const char file[] = "CUDA_DEVICE_SM_LIMIT=30\n"
                               "no equals sign\n"
                               "CUDA_DEVICE_MEMORY_LIMIT_1=5000m\r\n"
                               "\n"
                               "=value\n"
                               "\x01\xff\xfe garbage=\x02\n"
                               "CUDA_DEVICE_MEMORY_LIMIT_0=3000mb\n"
                               "CUDA_DEVICE_MEMORY_SHARED_CACHE=/pod/usage.cache\n"
                               "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n"
                               "LIBCUDA_LOG_LEVEL=4\n"
                               "CUDA_DEVICE_MEMORY_LIMIT_2=1g";
    load(file, sizeof file - 1, NULL);
    char skipped[256];
    skipped_lines(skipped, sizeof skipped);
    CHECK_STR(skipped, "2\n4\n5\n6\n7\n11\n");
    CHECK_U64(cfg.sm_limit[0], 30);
    CHECK_U64(cfg.mem_limit[0], 3000ULL << 20); /* line 9 after the rejected line 7 */
    CHECK_U64(cfg.mem_limit[1], 5000ULL << 20); /* CRLF stripped: 5000 MiB, not 5000 bytes */
    CHECK_U64(cfg.mem_limit[2], LB_MEM_UNLIMITED); /* unterminated last line: never read as a value */
    CHECK_STR(cfg.cache_path, "/pod/usage.cache");
    CHECK(cfg.log_level == 4); /* the file can set the level its own diagnostics are printed at */
    for (uint32_t i = 0; i < dg.n; i++)
        if (dg.d[i].skipped_line) {
            CHECK(dg.d[i].level == LB_LOG_ERROR);
            char want[32];
            snprintf(want, sizeof want, "line %u:", dg.d[i].line);
            CHECK(strstr(dg.d[i].msg, want) != NULL);
        }
}

static void test_one_mib_line(void)
{
    size_t big = 1u << 20;
    const char *head = "CUDA_DEVICE_SM_LIMIT=20\n";
    const char *tail = "\nCUDA_DEVICE_MEMORY_LIMIT_0=3000m\n";
    char *buf = malloc(strlen(head) + big + strlen(tail) + 1);
    strcpy(buf, head);
    memcpy(buf + strlen(head), "X=", 2);
    memset(buf + strlen(head) + 2, 'a', big - 2);
    strcpy(buf + strlen(head) + big, tail);
    size_t len = strlen(head) + big + strlen(tail);
    load(buf, len, NULL);
    char skipped[64];
    skipped_lines(skipped, sizeof skipped);
    CHECK_STR(skipped, "2\n");
    CHECK_U64(cfg.mem_limit[0], 3000ULL << 20);
    CHECK_U64(cfg.sm_limit[0], 20);
    /* Through the file reader too (fixed buffer, no allocation for the long line). */
    char p[1024];
    snprintf(p, sizeof p, "%s/big", unit_tmp_dir);
    unit_write_file(p, buf, len);
    memset(&dg, 0, sizeof dg);
    CHECK(lb_read_limits_file(p, &fv, &dg, 0) == 1);
    CHECK_U64(fv.lines, 3);
    CHECK_U64(fv.skipped, 1);
    CHECK(fv.var[LB_VAR_MEM_DEV0].set);
    free(buf);
}

static void test_line_length_boundary(void)
{
    /* 4095 bytes + LF is the longest line; one more byte is skipped. */
    char buf[2 * LB_LINE_MAX + 64];
    size_t o = 0;
    o += (size_t)sprintf(buf, "CUDA_DEVICE_MEMORY_SHARED_CACHE=/");
    while (o < LB_LINE_MAX - 1)
        buf[o++] = 'p';
    buf[o++] = '\n';
    size_t second = o;
    o += (size_t)sprintf(buf + o, "CUDA_DEVICE_MEMORY_SHARED_CACHE=/");
    while (o - second < LB_LINE_MAX)
        buf[o++] = 'q';
    buf[o++] = '\n';
    load(buf, o, NULL);
    char skipped[64];
    skipped_lines(skipped, sizeof skipped);
    CHECK_STR(skipped, "2\n");
    CHECK_U64(strlen(cfg.cache_path), LB_LINE_MAX - 1 - strlen("CUDA_DEVICE_MEMORY_SHARED_CACHE="));
}

static void test_rejected_memory_value_never_unlimited(void)
{
    /* Environment only, bad value: ERROR naming the variable and the source; device refuses. */
    struct fenv env = {{"CUDA_DEVICE_MEMORY_LIMIT_0=3000mb", NULL}};
    load(NULL, 0, &env);
    CHECK_U64(cfg.mem_limit[0], 0);
    int named = 0;
    for (uint32_t i = 0; i < dg.n; i++)
        if (dg.d[i].level == LB_LOG_ERROR && strstr(dg.d[i].msg, "CUDA_DEVICE_MEMORY_LIMIT_0=3000mb") &&
            strstr(dg.d[i].msg, "environment"))
            named = 1;
    CHECK(named);
    /* File value rejected, environment valid: still refused; in file mode the environment never
     * fills in for the file (it could say 0 = unlimited). */
    const char *file = "CUDA_DEVICE_MEMORY_LIMIT_0=3000x\n";
    struct fenv env2 = {{"CUDA_DEVICE_MEMORY_LIMIT_0=2000m", NULL}};
    load(file, strlen(file), &env2);
    CHECK_U64(cfg.mem_limit[0], 0);
    /* File value rejected, nothing else: refuse, even though a global limit would be larger. */
    const char *file3 = "CUDA_DEVICE_MEMORY_LIMIT_0=99999999999999999999999m\nCUDA_DEVICE_MEMORY_LIMIT=8g\n";
    load(file3, strlen(file3), NULL);
    CHECK_U64(cfg.mem_limit[0], 0);
    CHECK_U64(cfg.mem_limit[1], 8ULL << 30);
    /* A rejected global value refuses on devices without their own limit. */
    struct fenv env4 = {{"CUDA_DEVICE_MEMORY_LIMIT=lots", "CUDA_DEVICE_MEMORY_LIMIT_1=1g", NULL}};
    load(NULL, 0, &env4);
    CHECK_U64(cfg.mem_limit[0], 0);
    CHECK_U64(cfg.mem_limit[1], 1ULL << 30);
}

static void test_global_and_per_device(void)
{
    struct fenv env = {{"CUDA_DEVICE_MEMORY_LIMIT=2g", "CUDA_DEVICE_MEMORY_LIMIT_1=1g", "CUDA_DEVICE_MEMORY_LIMIT_2=0m",
                        "CUDA_DEVICE_SM_LIMIT=0", "CUDA_DEVICE_SM_LIMIT_3=25", NULL}};
    load(NULL, 0, &env);
    CHECK_U64(cfg.mem_limit[0], 2ULL << 30);
    CHECK_U64(cfg.mem_limit[1], 1ULL << 30);
    CHECK_U64(cfg.mem_limit[2], 2ULL << 30); /* 0 per device defers to the global value, as upstream */
    CHECK_U64(cfg.sm_limit[0], 100);
    CHECK_U64(cfg.sm_limit[3], 25);
    struct fenv env2 = {{"CUDA_DEVICE_MEMORY_LIMIT_0=0m", NULL}};
    load(NULL, 0, &env2);
    CHECK_U64(cfg.mem_limit[0], LB_MEM_UNLIMITED); /* HAMi's "0m = no limit" */
}

static void test_other_variables(void)
{
    const char *file = "CUDA_OVERSUBSCRIBE=true\nGPU_CORE_UTILIZATION_POLICY=force\nCUDA_TASK_PRIORITY=0\n"
                       "LIBVGPU_HOSTPID_BROKER=1\nCUDA_DISABLE_CONTROL=true\nHAMI_LIMITS_FORMAT=2\n"
                       "CUDA_DEVICE_SM_LIMIT=150\nNVIDIA_VISIBLE_DEVICES=all\n";
    load(file, strlen(file), NULL);
    CHECK(cfg.oversubscribe == 1);
    CHECK(cfg.policy == LB_POLICY_FORCE);
    CHECK(cfg.priority == 0);
    CHECK(cfg.hostpid_broker == 1);
    CHECK(cfg.format == 2);
    CHECK_U64(cfg.sm_limit[0], 100);
    int newer = 0, sm = 0;
    for (uint32_t i = 0; i < dg.n; i++) {
        newer |= dg.d[i].level == LB_LOG_WARN && strstr(dg.d[i].msg, "HAMI_LIMITS_FORMAT=2") != NULL;
        sm |= dg.d[i].level == LB_LOG_ERROR && strstr(dg.d[i].msg, "CUDA_DEVICE_SM_LIMIT=150") != NULL;
    }
    CHECK(newer);
    CHECK(sm);
    lb_file_vars_canonical(&fv, canon, sizeof canon);
    CHECK(strstr(canon, "NVIDIA_VISIBLE_DEVICES=all\n") != NULL);
    CHECK(strstr(canon, "CUDA_DISABLE_CONTROL=true\n") != NULL); /* a key libvgpu does not read */
}

const struct unit_test unit_limits_tests[] = {
    {"limits/valid vectors", test_valid_vectors},
    {"limits/malformed vectors", test_malformed_vectors},
    {"limits/memory grammar", test_memory_grammar},
    {"limits/memory grammar v2.10", test_memory_grammar_legacy},
    {"limits/file beats environment", test_file_beats_environment},
    {"limits/log level is the one key the environment sets in file mode", test_log_level_from_environment},
    {"limits/absent file uses environment", test_absent_file_uses_environment},
    {"limits/defaults", test_no_file_no_env_defaults},
    {"limits/malformed lines skipped, following lines apply", test_malformed_lines_skipped_and_following_apply},
    {"limits/1 MiB line", test_one_mib_line},
    {"limits/line length boundary", test_line_length_boundary},
    {"limits/rejected memory value is never unlimited", test_rejected_memory_value_never_unlimited},
    {"limits/global and per-device", test_global_and_per_device},
    {"limits/other variables", test_other_variables},
    {NULL, NULL},
};
