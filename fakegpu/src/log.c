/* Logging and tiny helpers. No stdio buffers: the libraries may log from any thread or after fork. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fg.h"

void fg_log(const char *fmt, ...) {
    char buf[1024];
    int saved = errno;
    int n = snprintf(buf, sizeof buf, "fakegpu: ");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof buf - 2)
        len = sizeof buf - 2;
    buf[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
    errno = saved;
}

uint64_t fg_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

char *fg_copy(char *dst, size_t len, const char *src) {
    if (len == 0)
        return dst;
    snprintf(dst, len, "%s", src ? src : "");
    return dst;
}
