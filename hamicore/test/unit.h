#ifndef LB_UNIT_H
#define LB_UNIT_H
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct unit_test {
    const char *name;
    void (*fn)(void);
};

extern int unit_case_failed;
extern const char *unit_vectors_dir; /* testdata/limits */
extern const char *unit_tmp_dir;     /* scratch directory of this run */
void unit_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Writes n bytes to path (created or truncated); a failure fails the case. */
void unit_write_file(const char *path, const void *b, size_t n);

#define CHECK(c)                                                                                                   \
    do {                                                                                                           \
        if (!(c))                                                                                                  \
            unit_fail(__FILE__, __LINE__, "%s", #c);                                                               \
    } while (0)
#define CHECK_U64(a, b)                                                                                            \
    do {                                                                                                           \
        unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);                             \
        if (a_ != b_)                                                                                              \
            unit_fail(__FILE__, __LINE__, "%s = %llu, want %llu", #a, a_, b_);                                     \
    } while (0)
#define CHECK_STR(a, b)                                                                                            \
    do {                                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                                           \
        if (strcmp(a_, b_) != 0)                                                                                   \
            unit_fail(__FILE__, __LINE__, "%s:\n--- got\n%s\n--- want\n%s", #a, a_, b_);                           \
    } while (0)

extern const struct unit_test unit_limits_tests[];
extern const struct unit_test unit_limits_file_tests[];
extern const struct unit_test unit_region_tests[];
extern const struct unit_test unit_region_fds_tests[];
extern const struct unit_test unit_procaddr_tests[];
extern const struct unit_test unit_modglobals_tests[];
extern const struct unit_test unit_sched_tests[];
extern const struct unit_test unit_ledger_tests[];
#endif
