/* C unit test runner: every case runs in a forked child (the library keeps once-per-process
 * state, and a crash must fail one case, not the run). Last line: "N passed, N failed". */
#include "unit.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* region.c takes its locks with the library's reentrancy guard up (guard.h); the library defines
 * it in init.c, which the unit tests do not link. */
_Thread_local int lb_guard __attribute__((tls_model("initial-exec")));

int unit_case_failed;
const char *unit_vectors_dir;
const char *unit_tmp_dir;

void unit_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "    %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    unit_case_failed = 1;
}

void unit_write_file(const char *path, const void *b, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, b, n) == (ssize_t)n);
    close(fd);
}

int main(int argc, char **argv)
{
    unit_vectors_dir = argc > 1 ? argv[1] : "../testdata/limits";
    char tmpl[] = "/tmp/hamicore-unit.XXXXXX";
    unit_tmp_dir = mkdtemp(tmpl);
    if (!unit_tmp_dir) {
        perror("mkdtemp");
        return 2;
    }
    const struct unit_test *suites[] = {unit_limits_tests,     unit_limits_file_tests, unit_region_tests,
                                        unit_region_fds_tests, unit_procaddr_tests,    unit_modglobals_tests,
                                        unit_sched_tests,      unit_ledger_tests};
    int passed = 0, failed = 0;
    for (size_t s = 0; s < sizeof suites / sizeof suites[0]; s++) {
        for (const struct unit_test *t = suites[s]; t->name; t++) {
            fflush(NULL);
            pid_t pid = fork();
            if (pid == 0) {
                unit_case_failed = 0;
                t->fn();
                fflush(NULL);
                _exit(unit_case_failed ? 1 : 0);
            }
            int st = 0;
            waitpid(pid, &st, 0);
            int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
            printf("%s %s\n", ok ? "PASS" : "FAIL", t->name);
            if (!ok && WIFSIGNALED(st))
                printf("    killed by signal %d\n", WTERMSIG(st));
            ok ? passed++ : failed++;
        }
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", unit_tmp_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", unit_tmp_dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
