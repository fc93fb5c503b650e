/* A tiny allocation-free formatter: the library never calls stdio (it runs inside arbitrary
 * programs, possibly inside their malloc or signal paths). Supports %s %.*s %c %d %u %ld %lu
 * %lld %llu %zu %x %llx %%. Always NUL-terminates; returns the length written. */
#ifndef LB_FMT_H
#define LB_FMT_H
#include <stdarg.h>
#include <stddef.h>

size_t lb_vfmt(char *buf, size_t size, const char *fmt, va_list ap);
size_t lb_fmt(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
