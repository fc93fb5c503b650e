/* A minimal test harness: CHECK counts, the runner prints "N passed, N failed". */
#ifndef FG_CHECK_H
#define FG_CHECK_H

#include <stdio.h>

extern int fg_passed, fg_failed;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (cond) {                                                                                                    \
            fg_passed++;                                                                                               \
        } else {                                                                                                       \
            fg_failed++;                                                                                               \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                                           \
        }                                                                                                              \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                                           \
    do {                                                                                                               \
        if (cond) {                                                                                                    \
            fg_passed++;                                                                                               \
        } else {                                                                                                       \
            fg_failed++;                                                                                               \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                           \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

void test_profile(void);
void test_fault(void);
void test_state(void);
void test_share(void);
void test_timeline(void);
void test_procaddr(void);
void test_event(void);

/* A fresh directory under TMPDIR, removed by the runner at exit. */
const char *fg_test_dir(void);

#endif
