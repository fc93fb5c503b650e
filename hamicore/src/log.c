/* One prefix, one write(2) per message from a stack buffer: no stdio, no allocation, no locks, so
 * logging is safe from any hook and never interleaves half lines with the application's output. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <unistd.h>

#include "fmt.h"
#include "limitsfile.h"

int lb_log_level = LB_LOG_DEFAULT;

static const char *const k_names[] = {"", "ERROR", "WARN", "INFO", "DEBUG"};

static void emit(int level, const char *msg)
{
    char buf[512];
    size_t n = lb_fmt(buf, sizeof buf - 1, "[limitbed vgpu pid=%d] %s: %s", (int)getpid(), k_names[level], msg);
    buf[n++] = '\n';
    int saved = errno; /* logging must not change what the application sees in errno */
    for (size_t off = 0; off < n;) {
        ssize_t w = write(STDERR_FILENO, buf + off, n - off);
        if (w <= 0) {
            if (w < 0 && errno == EINTR)
                continue;
            break;
        }
        off += (size_t)w;
    }
    errno = saved;
}

void lb_log(int level, const char *fmt, ...)
{
    if (level > lb_log_level || level <= LB_LOG_SILENT)
        return;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    lb_vfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    emit(level, msg);
}

void lb_log_diags(const struct lb_diags *dg)
{
    for (uint32_t i = 0; i < dg->n; i++)
        if (dg->d[i].level <= lb_log_level && dg->d[i].level > LB_LOG_SILENT)
            emit(dg->d[i].level, dg->d[i].msg);
    if (dg->dropped)
        lb_log(LB_LOG_ERROR, "%u more diagnostics were not kept", dg->dropped);
}
