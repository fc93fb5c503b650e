/* The limits file reader: its I/O edge cases (present but unreadable, too large) and the v2.10
 * reader. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "limitsfile.h"
#include "unit.h"

static struct lb_file_vars fv;
static struct lb_diags dg;

/* Present but unreadable is not absent: the reader says so (-1), naming the cause, so that the
 * library refuses instead of falling back to the environment (only ENOENT means env mode). */
static int refusal_names(const char *what)
{
    for (uint32_t i = 0; i < dg.n; i++)
        if (dg.d[i].level == LB_LOG_ERROR && strstr(dg.d[i].msg, what) && strstr(dg.d[i].msg, "refused"))
            return 1;
    return 0;
}

static void test_file_reader_io_errors(void)
{
    memset(&dg, 0, sizeof dg);
    CHECK(lb_read_limits_file(unit_tmp_dir, &fv, &dg, 0) == -1); /* a directory */
    CHECK(refusal_names("not a regular file"));
    char p[1024];
    snprintf(p, sizeof p, "%s/fifo", unit_tmp_dir);
    mkfifo(p, 0600);
    memset(&dg, 0, sizeof dg);
    CHECK(lb_read_limits_file(p, &fv, &dg, 0) == -1); /* must not block */
    CHECK(refusal_names("not a regular file"));
    if (geteuid() != 0) {
        snprintf(p, sizeof p, "%s/noread", unit_tmp_dir);
        unit_write_file(p, "A=1\n", 4);
        chmod(p, 0);
        memset(&dg, 0, sizeof dg);
        CHECK(lb_read_limits_file(p, &fv, &dg, 0) == -1);
        CHECK(refusal_names("Permission denied"));
    }
    /* The program's descriptor table is full when the library starts (EMFILE). */
    snprintf(p, sizeof p, "%s/present", unit_tmp_dir);
    unit_write_file(p, "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n", 33);
    int fds[65536], n = 0;
    while (n < 65536 && (fds[n] = open("/dev/null", O_RDONLY)) >= 0)
        n++;
    memset(&dg, 0, sizeof dg);
    int r = lb_read_limits_file(p, &fv, &dg, 0);
    while (n > 0)
        close(fds[--n]);
    CHECK(r == -1);
    CHECK(refusal_names("Too many open files"));
    /* Absent is absent: environment mode, as before. */
    snprintf(p, sizeof p, "%s/no/such/file", unit_tmp_dir);
    memset(&dg, 0, sizeof dg);
    CHECK(lb_read_limits_file(p, &fv, &dg, 0) == 0);
}

static void test_file_larger_than_limit(void)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/huge", unit_tmp_dir);
    FILE *f = fopen(p, "wb");
    fputs("CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n", f);
    for (size_t i = 0; i < (LB_FILE_MAX / 16) + 16; i++)
        fputs("PADDING_VAR=xxx\n", f); /* 16 bytes */
    fputs("CUDA_DEVICE_MEMORY_LIMIT_1=1g\n", f);
    fclose(f);
    memset(&dg, 0, sizeof dg);
    CHECK(lb_read_limits_file(p, &fv, &dg, 0) == 1);
    CHECK(fv.var[LB_VAR_MEM_DEV0].set);
    CHECK(!fv.var[LB_VAR_MEM_DEV0 + 1].set); /* beyond the first LB_FILE_MAX bytes */
    int err = 0;
    for (uint32_t i = 0; i < dg.n; i++)
        err |= dg.d[i].level == LB_LOG_ERROR && strstr(dg.d[i].msg, "larger than") != NULL;
    CHECK(err);
}

static void test_legacy_reader(void)
{
    /* v2.10: CR kept (3000 bytes), stops at the first line without '='. */
    static const char file[] = "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\r\n\nCUDA_DEVICE_MEMORY_SHARED_CACHE=/pod/usage.cache\n";
    struct lb_reader r;
    memset(&dg, 0, sizeof dg);
    lb_reader_init(&r, &fv, &dg, "/overrideEnv", 1);
    lb_reader_feed(&r, file, sizeof file - 1);
    lb_reader_finish(&r);
    CHECK(fv.var[LB_VAR_MEM_DEV0].set);
    CHECK(fv.var[LB_VAR_MEM_DEV0].len == 6); /* "3000m\r" */
    CHECK(!fv.var[LB_VAR_CACHE].set);
    char v[16];
    memcpy(v, fv.pool + fv.var[LB_VAR_MEM_DEV0].off, 6);
    v[6] = 0;
    CHECK_U64(lb_parse_memory_legacy(v), 3000);
}

const struct unit_test unit_limits_file_tests[] = {
    {"limits/file reader I/O errors", test_file_reader_io_errors},
    {"limits/file larger than the read limit", test_file_larger_than_limit},
    {"limits/v2.10 reader", test_legacy_reader},
    {NULL, NULL},
};
