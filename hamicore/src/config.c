/* The I/O around the pure loader: read /overrideEnv, then resolve against the environment. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmt.h"
#include "log.h"

struct lb_config lb_cfg;
struct lb_diags lb_init_diags;
static struct lb_file_vars g_file_vars;
static struct lb_reader g_reader;
static char g_chunk[LB_READ_CHUNK];

/* Present but unusable: an ERROR naming the cause; the caller refuses every allocation. */
static int unusable(struct lb_diags *dg, const char *path, const char *cause)
{
    lb_diag_add(dg, LB_LOG_ERROR, 0, 0,
                "%s: %s: every allocation is refused (only an absent file means environment mode); fix the file "
                "or the process's descriptors, and start it again",
                path, cause);
    return -1;
}

int lb_read_limits_file(const char *path, struct lb_file_vars *fv, struct lb_diags *dg, int legacy)
{
    /* O_NONBLOCK: a FIFO or device at that path must not hang every CUDA program. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR) {
            lb_diag_add(dg, LB_LOG_INFO, 0, 0, "%s: absent; limits come from the environment", path);
            return 0;
        }
        return unusable(dg, path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return unusable(dg, path, "not a regular file");
    }
    lb_reader_init(&g_reader, fv, dg, path, legacy);
    size_t total = 0;
    for (;;) {
        size_t want = sizeof g_chunk;
        if (total + want > LB_FILE_MAX)
            want = LB_FILE_MAX - total;
        if (want == 0) {
            char probe;
            ssize_t more = read(fd, &probe, 1);
            if (more > 0)
                lb_diag_add(dg, LB_LOG_ERROR, 0, 0,
                            "%s: larger than %u bytes; only its first %u bytes are read (their last partial line "
                            "is skipped)",
                            path, LB_FILE_MAX, LB_FILE_MAX);
            break;
        }
        ssize_t n = read(fd, g_chunk, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            char cause[96];
            int e = errno;
            close(fd);
            lb_fmt(cause, sizeof cause, "read error after %zu bytes (%s)", total, strerror(e));
            return unusable(dg, path, cause);
        }
        if (n == 0)
            break;
        lb_reader_feed(&g_reader, g_chunk, (size_t)n);
        total += (size_t)n;
    }
    lb_reader_finish(&g_reader);
    close(fd);
    lb_diag_add(dg, LB_LOG_DEBUG, 0, 0, "%s: %u lines read, %u skipped", path, fv->lines, fv->skipped);
    return 1;
}

static const char *env_lookup(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

void lb_config_load(void)
{
    int have = 0;
#ifndef LIMITBED_LEGACY_HAMI_V2_10
    /* The file first, before anything else is decided (region path, limits, log level). */
    have = lb_read_limits_file(LB_OVERRIDE_FILE, &g_file_vars, &lb_init_diags, 0);
    if (have < 0) {
        /* File mode without its file: nothing may come from the environment but the log level,
         * and every device refuses (limit 0); there is no cache path to join either. */
        static char why[sizeof lb_cfg.unusable];
        lb_fmt(why, sizeof why, "%s", lb_init_diags.n ? lb_init_diags.d[lb_init_diags.n - 1].msg : LB_OVERRIDE_FILE);
        memset(&g_file_vars, 0, sizeof g_file_vars);
        lb_resolve(&g_file_vars, env_lookup, NULL, 0, &lb_cfg, &lb_init_diags);
        for (int i = 0; i < LB_MAX_DEVICES; i++)
            lb_cfg.mem_limit[i] = 0;
        memcpy(lb_cfg.unusable, why, sizeof why);
    } else {
        lb_resolve(have ? &g_file_vars : NULL, env_lookup, NULL, 0, &lb_cfg, &lb_init_diags);
    }
#else
    /* v2.10: the environment only; the file is applied at NVML initialization (see nvml.c). */
    (void)have;
    lb_resolve(NULL, env_lookup, NULL, 1, &lb_cfg, &lb_init_diags);
#endif
    lb_log_level = lb_cfg.log_level;
    lb_log_diags(&lb_init_diags);
}

#ifdef LIMITBED_LEGACY_HAMI_V2_10
/* v2.10's load_env_from_file(): stop at the first line without '=', keep CR, setenv(k, v, 1). */
void lb_legacy_apply_file(void)
{
    struct lb_diags dg = {0};
    if (lb_read_limits_file(LB_OVERRIDE_FILE, &g_file_vars, &dg, 1) != 1)
        return;
    char name[64], val[LB_LINE_MAX];
    for (int var = 0; var < LB_VAR_COUNT; var++) {
        const struct lb_val *v = &g_file_vars.var[var];
        if (!v->set)
            continue;
        memcpy(val, g_file_vars.pool + v->off, v->len);
        val[v->len] = '\0';
        setenv(lb_var_name(var, name, sizeof name), val, 1);
    }
    for (uint32_t i = 0; i < g_file_vars.nother; i++) {
        const struct lb_val *v = &g_file_vars.other[i].v;
        uint32_t kl = g_file_vars.other[i].klen < 63 ? g_file_vars.other[i].klen : 63;
        memcpy(name, g_file_vars.pool + g_file_vars.other[i].koff, kl);
        name[kl] = '\0';
        memcpy(val, g_file_vars.pool + v->off, v->len);
        val[v->len] = '\0';
        setenv(name, val, 1);
    }
}
#endif
