#include "fmt.h"

#include <stdint.h>

struct out {
    char *buf;
    size_t size, len;
};

static void put(struct out *o, char c)
{
    if (o->len + 1 < o->size)
        o->buf[o->len] = c;
    o->len++;
}

static void put_u(struct out *o, unsigned long long v, unsigned base)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    while (n)
        put(o, tmp[--n]);
}

size_t lb_vfmt(char *buf, size_t size, const char *f, va_list ap)
{
    struct out o = {buf, size, 0};
    for (; *f; f++) {
        if (*f != '%') {
            put(&o, *f);
            continue;
        }
        f++;
        int prec = -1, lng = 0, sz = 0;
        if (f[0] == '.' && f[1] == '*') {
            prec = va_arg(ap, int);
            f += 2;
        }
        while (*f == 'l') {
            lng++;
            f++;
        }
        if (*f == 'z') {
            sz = 1;
            f++;
        }
        switch (*f) {
        case 's': {
            const char *s = va_arg(ap, const char *);
            if (!s)
                s = "(null)";
            for (int i = 0; s[i] && (prec < 0 || i < prec); i++)
                put(&o, s[i]);
            break;
        }
        case 'c':
            put(&o, (char)va_arg(ap, int));
            break;
        case 'd': {
            long long v = lng >= 2 ? va_arg(ap, long long) : lng ? va_arg(ap, long) : va_arg(ap, int);
            unsigned long long u = (unsigned long long)v;
            if (v < 0) {
                put(&o, '-');
                u = 0 - u;
            }
            put_u(&o, u, 10);
            break;
        }
        case 'u':
        case 'x': {
            unsigned long long v = sz ? va_arg(ap, size_t)
                                   : lng >= 2 ? va_arg(ap, unsigned long long)
                                   : lng       ? va_arg(ap, unsigned long)
                                               : va_arg(ap, unsigned);
            put_u(&o, v, *f == 'x' ? 16 : 10);
            break;
        }
        case '%':
            put(&o, '%');
            break;
        case '\0':
            f--;
            break;
        default:
            put(&o, '%');
            put(&o, *f);
        }
    }
    if (o.size)
        o.buf[o.len < o.size ? o.len : o.size - 1] = '\0';
    return o.len < o.size ? o.len : (o.size ? o.size - 1 : 0);
}

size_t lb_fmt(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = lb_vfmt(buf, size, fmt, ap);
    va_end(ap);
    return n;
}
