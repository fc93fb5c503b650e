/*
 * The device memory a module image's global variables take when the driver loads it — the
 * program-chosen part of a module (its `__device__` arrays), as opposed to its code.
 *
 * One reader for every C component: fakegpu charges a loaded module with it, and libvgpu.so
 * charges the same figure before it lets the driver load the image. Header-only, no allocation,
 * no libc beyond string functions: it runs inside the library's hooks.
 *
 *   PTX text      the sum of the module-scope `.global` variables (not `.extern`): element size
 *                 x vector width x array dimensions (an unsized array: its initializer's elements)
 *   ELF cubin     the sizes of its `.nv.global*` sections (`.nv.global` is the zero-initialised
 *                 data, `.nv.global.init` the initialised)
 *   fatbin        the largest figure of its PTX and ELF entries (the driver loads one of them);
 *                 also behind the __fatBinC_Wrapper_t that cudart registers
 *
 * lb_module_globals returns 0 and the bytes, or -1 when it cannot tell: a compressed fatbin
 * entry, a damaged header, or a format it does not know. The image is read where the driver
 * would read it; every offset taken from a header is bounded before it is followed.
 */
#ifndef LIMITBED_MODGLOBALS_H
#define LIMITBED_MODGLOBALS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define LB_MG_PTX_MAX (256u << 20)      /* longest PTX text read */
#define LB_MG_ELF_MAX (1ull << 32)      /* largest ELF image believed */
#define LB_MG_FATBIN_MAGIC 0xBA55ED50u
#define LB_MG_FATBIN_WRAPPER 0x466243B1u
#define LB_MG_FATBIN_COMPRESSED 0x2000u /* entry flag: the payload is compressed */

static inline uint64_t lb_mg_rd(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static inline int lb_mg_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Bytes of one PTX element type (.b8 … .f64, .pred); 0 if not a type. */
static inline uint64_t lb_mg_ptx_type(const char *t, size_t n)
{
    if (n < 3 || t[0] != '.')
        return 0;
    if (n == 5 && !memcmp(t, ".pred", 5))
        return 1;
    char k = t[1];
    if (k != 'b' && k != 'u' && k != 's' && k != 'f')
        return 0;
    size_t bits = 0;
    for (size_t i = 2; i < n; i++) {
        if (t[i] < '0' || t[i] > '9')
            return 0;
        bits = bits * 10 + (size_t)(t[i] - '0');
    }
    return bits == 8 || bits == 16 || bits == 32 || bits == 64 ? bits / 8 : bits == 128 ? 16 : 0;
}

/* One `.global` declaration starting after the keyword; *ok = 0 if it cannot be sized. */
static inline uint64_t lb_mg_ptx_decl(const char *p, const char *end, int *ok)
{
    uint64_t elem = 0, vec = 1, count = 1, total;
    int unsized = 0;
    while (p < end && *p != ';') {
        while (p < end && lb_mg_space(*p))
            p++;
        const char *t = p;
        if (p < end && *p == '[') {
            uint64_t d = 0;
            int digits = 0;
            for (p++; p < end && *p >= '0' && *p <= '9'; p++, digits++)
                if (__builtin_mul_overflow(d, 10, &d) || __builtin_add_overflow(d, (uint64_t)(*p - '0'), &d))
                    return *ok = 0, 0;
            if (p >= end || *p != ']')
                return *ok = 0, 0;
            p++;
            if (!digits)
                unsized = 1;
            else if (__builtin_mul_overflow(count, d, &count))
                return *ok = 0, 0;
            continue;
        }
        if (p < end && *p == '=') { /* an initializer: only an unsized array needs it counted */
            if (unsized) {
                uint64_t n = 1;
                for (p++; p < end && *p != ';'; p++)
                    n += *p == ',';
                if (__builtin_mul_overflow(count, n, &count))
                    return *ok = 0, 0;
                unsized = 0;
            }
            while (p < end && *p != ';')
                p++;
            break;
        }
        while (p < end && !lb_mg_space(*p) && *p != ';' && *p != '[' && *p != '=')
            p++;
        size_t n = (size_t)(p - t);
        if (n == 3 && !memcmp(t, ".v2", 3))
            vec = 2;
        else if (n == 3 && !memcmp(t, ".v4", 3))
            vec = 4;
        else if (n == 3 && !memcmp(t, ".v8", 3))
            vec = 8;
        else if (lb_mg_ptx_type(t, n))
            elem = lb_mg_ptx_type(t, n);
        else if (n == 0 && p < end && *p != ';')
            p++;
    }
    if (!elem || unsized || __builtin_mul_overflow(elem * vec, count, &total))
        return *ok = 0, 0;
    return total;
}

/* PTX text (NUL-terminated or `max` bytes long, with its .version directive): module-scope
 * `.global` variables. */
static inline int lb_mg_ptx(const char *s, size_t max, uint64_t *bytes)
{
    size_t len = strnlen(s, max && max < LB_MG_PTX_MAX ? max : LB_MG_PTX_MAX);
    const char *p = s, *end = s + len;
    int depth = 0, ok = 1, ext = 0, version = 0;
    uint64_t sum = 0;
    while (p < end) {
        char c = *p;
        if (c == '/' && p + 1 < end && p[1] == '/') { /* a line comment */
            while (p < end && *p != '\n')
                p++;
            continue;
        }
        if (c == '/' && p + 1 < end && p[1] == '*') {
            for (p += 2; p + 1 < end && !(p[0] == '*' && p[1] == '/'); p++)
                ;
            p += 2;
            continue;
        }
        if (c == '{')
            depth++;
        else if (c == '}')
            depth -= depth > 0;
        else if (c == ';')
            ext = 0;
        if (c == '.' && depth == 0) {
            const char *t = p;
            while (p < end && !lb_mg_space(*p) && *p != ';')
                p++;
            size_t n = (size_t)(p - t);
            if (n == 8 && !memcmp(t, ".version", 8))
                version = 1;
            else if (n == 7 && !memcmp(t, ".extern", 7))
                ext = 1;
            else if (n == 7 && !memcmp(t, ".global", 7) && !ext) {
                uint64_t b = lb_mg_ptx_decl(p, end, &ok);
                if (!ok || __builtin_add_overflow(sum, b, &sum))
                    return -1;
            }
            continue;
        }
        p++;
    }
    if (!version)
        return -1; /* not PTX text */
    *bytes = sum;
    return 0;
}

/* A 64-bit little-endian ELF image: its .nv.global* sections. */
static inline int lb_mg_elf(const unsigned char *e, uint64_t limit, uint64_t *bytes)
{
    if (limit < 64 || e[4] != 2 || e[5] != 1) /* ELFCLASS64, little-endian */
        return -1;
    uint64_t shoff = lb_mg_rd(e + 0x28, 8), entsz = lb_mg_rd(e + 0x3A, 2), num = lb_mg_rd(e + 0x3C, 2);
    uint64_t stridx = lb_mg_rd(e + 0x3E, 2);
    if (entsz < 64 || num == 0 || stridx >= num || shoff > limit || num * entsz > limit - shoff)
        return -1;
    const unsigned char *strsh = e + shoff + stridx * entsz;
    uint64_t stroff = lb_mg_rd(strsh + 0x18, 8), strsz = lb_mg_rd(strsh + 0x20, 8);
    if (stroff > limit || strsz > limit - stroff)
        return -1;
    uint64_t sum = 0;
    for (uint64_t i = 0; i < num; i++) {
        const unsigned char *sh = e + shoff + i * entsz;
        uint64_t name = lb_mg_rd(sh, 4), size = lb_mg_rd(sh + 0x20, 8);
        static const char want[] = ".nv.global";
        if (name >= strsz || strsz - name < sizeof want - 1)
            continue;
        if (!memcmp(e + stroff + name, want, sizeof want - 1) && __builtin_add_overflow(sum, size, &sum))
            return -1;
    }
    *bytes = sum;
    return 0;
}

/* A fatbin container: the largest figure over its entries; a compressed entry: unknown. */
static inline int lb_mg_fatbin(const unsigned char *f, size_t max, uint64_t *bytes)
{
    uint64_t hdr = lb_mg_rd(f + 6, 2), fat = lb_mg_rd(f + 8, 8), off = 0, best = 0;
    if (hdr < 16 || fat > LB_MG_ELF_MAX || (max && (max < hdr || fat > max - hdr)))
        return -1;
    const unsigned char *e = f + hdr;
    while (off + 64 <= fat) {
        const unsigned char *en = e + off;
        uint64_t kind = lb_mg_rd(en, 2), ehdr = lb_mg_rd(en + 4, 4), size = lb_mg_rd(en + 8, 8);
        uint64_t flags = lb_mg_rd(en + 40, 8), b = 0;
        if (ehdr < 64 || ehdr > fat - off || size > fat - off - ehdr)
            return -1;
        if (flags & LB_MG_FATBIN_COMPRESSED)
            return -1;
        const unsigned char *payload = en + ehdr;
        if (kind == 2 && size >= 64 && !memcmp(payload, "\x7f" "ELF", 4)) {
            if (lb_mg_elf(payload, size, &b) != 0)
                return -1;
        } else if (kind == 1) {
            /* PTX payloads are NUL-padded text within `size` bytes */
            if (lb_mg_ptx((const char *)payload, size, &b) != 0)
                return -1;
        }
        best = b > best ? b : best;
        off += ehdr + size;
    }
    *bytes = best;
    return 0;
}

/* The image starts with the little-endian 4-byte magic m, read a byte at a time. */
static inline int lb_mg_magic(const unsigned char *u, uint32_t m)
{
    for (int i = 0; i < 4; i++)
        if (u[i] != (unsigned char)(m >> (8 * i)))
            return 0;
    return 1;
}

/* len: the image's length when known (a file), 0 when not (cuModuleLoadData's pointer). */
static inline int lb_module_globals(const void *image, size_t len, uint64_t *bytes)
{
    const unsigned char *u = image;
    *bytes = 0;
    if (!image || (len && len < 16))
        return len ? lb_mg_ptx((const char *)image, len, bytes) : -1;
    /* Without a length the image may be a short PTX string: its first bytes are compared one at a
     * time, never reading past one that differs (a NUL ends the text; no magic holds one). */
    uint32_t magic = lb_mg_magic(u, LB_MG_FATBIN_WRAPPER)  ? LB_MG_FATBIN_WRAPPER
                     : lb_mg_magic(u, LB_MG_FATBIN_MAGIC) ? LB_MG_FATBIN_MAGIC
                                                           : 0;
    if (magic == LB_MG_FATBIN_WRAPPER) { /* __fatBinC_Wrapper_t: magic, version, data pointer */
        const void *data;
        memcpy(&data, u + 8, sizeof data);
        if (!data || (uint32_t)lb_mg_rd(data, 4) != LB_MG_FATBIN_MAGIC)
            return -1;
        return lb_mg_fatbin(data, 0, bytes);
    }
    if (magic == LB_MG_FATBIN_MAGIC)
        return lb_mg_fatbin(u, len, bytes);
    if (lb_mg_magic(u, 0x464c457fu)) /* "\x7f" "ELF" */
        return lb_mg_elf(u, len ? len : LB_MG_ELF_MAX, bytes);
    return lb_mg_ptx((const char *)image, len, bytes);
}

#endif /* LIMITBED_MODGLOBALS_H */
