/*
 * The limits file's streaming line reader (see limitsfile.h). Rules (docs/hamicore.md, "Reader
 * grammar"), shared with the Go reader in plugin/limitsfile through testdata/limits:
 *   - a line is the bytes before an LF; one trailing CR is dropped (CRLF-edited files);
 *   - skipped, with an ERROR naming the line number: a last line without LF (a torn write:
 *     "..._LIMIT_0=30" would otherwise mean 30 bytes), a line of 4096 bytes or more, an empty
 *     line, a line holding NUL, CR or another control byte, a line without '=', a key that is
 *     not [A-Za-z_][A-Za-z0-9_]*, and a memory variable whose value is not a memory value;
 *   - reading always continues with the next line.
 */
#include "limitsfile.h"

#include <stddef.h>
#include <string.h>

/* Printable, length-limited copy of untrusted bytes for a message. */
static const char *sanitize(const char *s, size_t n, char *buf, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f) {
            buf[o++] = (char)c;
        } else {
            buf[o++] = '\\';
            buf[o++] = 'x';
            buf[o++] = "0123456789abcdef"[c >> 4];
            buf[o++] = "0123456789abcdef"[c & 15];
        }
        if (i == 47 && n > 48) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
    }
    buf[o] = '\0';
    return buf;
}

void lb_reader_init(struct lb_reader *r, struct lb_file_vars *fv, struct lb_diags *dg, const char *origin,
                    int legacy)
{
    memset(fv, 0, offsetof(struct lb_file_vars, pool));
    r->fv = fv;
    r->dg = dg;
    r->origin = origin ? origin : "limits file";
    r->len = 0;
    r->overlong = 0;
    r->legacy = (uint8_t)!!legacy;
    r->stopped = 0;
}

static int pool_put(struct lb_file_vars *fv, const char *s, size_t n, uint32_t *off)
{
    if (n > LB_POOL_SIZE - fv->pool_used)
        return -1;
    memcpy(fv->pool + fv->pool_used, s, n);
    *off = fv->pool_used;
    fv->pool_used += (uint32_t)n;
    return 0;
}

#define SKIP(...)                                                                                  \
    do {                                                                                           \
        fv->skipped++;                                                                             \
        lb_diag_add(r->dg, LB_LOG_ERROR, no, 1, __VA_ARGS__);                                      \
        return;                                                                                    \
    } while (0)

static void store(struct lb_reader *r, uint32_t no, const char *k, size_t kn, const char *v, size_t vn)
{
    struct lb_file_vars *fv = r->fv;
    char kb[200];
    int var = lb_var_lookup(k, kn);
    struct lb_val *slot = NULL;
    if (var >= 0) {
        slot = &fv->var[var];
        if (lb_var_is_memory(var) && !r->legacy) {
            uint64_t bytes;
            if (lb_parse_memory(v, vn, &bytes) != 0) {
                slot->rejected = 1;
                char vb[200];
                SKIP("%s line %u: %s=%s is not a memory value ([0-9]+[kKmMgG]?, at most 2^64-1 bytes); "
                     "line skipped",
                     r->origin, no, sanitize(k, kn, kb, sizeof kb), sanitize(v, vn, vb, sizeof vb));
            }
        }
    } else {
        for (uint32_t i = 0; i < fv->nother && !slot; i++)
            if (fv->other[i].klen == kn && memcmp(fv->pool + fv->other[i].koff, k, kn) == 0)
                slot = &fv->other[i].v;
        if (!slot) {
            if (fv->nother >= LB_MAX_OTHER) {
                lb_diag_add(r->dg, LB_LOG_INFO, no, 0, "%s line %u: %s is not read by libvgpu; ignored", r->origin,
                            no, sanitize(k, kn, kb, sizeof kb));
                return;
            }
            uint32_t koff;
            if (pool_put(fv, k, kn, &koff) != 0)
                SKIP("%s line %u: more than %d bytes of values in the file; line skipped", r->origin, no,
                     LB_POOL_SIZE);
            fv->other[fv->nother].koff = koff;
            fv->other[fv->nother].klen = (uint32_t)kn;
            slot = &fv->other[fv->nother++].v;
            lb_diag_add(r->dg, LB_LOG_DEBUG, no, 0, "%s line %u: %s is not read by libvgpu; ignored", r->origin,
                        no, sanitize(k, kn, kb, sizeof kb));
        }
    }
    uint32_t off;
    if (slot->set && vn <= slot->len) {
        memcpy(fv->pool + slot->off, v, vn); /* a repeated key reuses its space */
        off = slot->off;
    } else if (pool_put(fv, v, vn, &off) != 0)
        SKIP("%s line %u: more than %d bytes of values in the file; line skipped", r->origin, no, LB_POOL_SIZE);
    if (slot->set)
        lb_diag_add(r->dg, LB_LOG_WARN, no, 0, "%s line %u: %s repeats line %u; the later value is used", r->origin,
                    no, sanitize(k, kn, kb, sizeof kb), slot->line);
    slot->off = off;
    slot->len = (uint32_t)vn;
    slot->line = no;
    slot->set = 1;
}

static void line_done(struct lb_reader *r, int terminated)
{
    struct lb_file_vars *fv = r->fv;
    uint32_t no = ++fv->lines;
    const char *l = r->line;
    size_t n = r->len;
    int overlong = r->overlong;
    r->len = 0;
    r->overlong = 0;

    if (r->legacy) {
        /* v2.10: fgets, strip "\n" only, stop at the first line without '='. */
        const char *eq = overlong ? NULL : memchr(l, '=', n);
        if (!eq || memchr(l, '\0', n)) {
            r->stopped = 1;
            lb_diag_add(r->dg, LB_LOG_DEBUG, no, 0, "%s line %u: no '='; the v2.10 reader stops here", r->origin,
                        no);
            return;
        }
        if (eq == l)
            return; /* setenv("") fails silently in v2.10 */
        store(r, no, l, (size_t)(eq - l), eq + 1, n - (size_t)(eq - l) - 1);
        return;
    }

    if (!terminated)
        SKIP("%s line %u: the file does not end with LF (a truncated write?); line skipped", r->origin, no);
    if (overlong)
        SKIP("%s line %u: longer than %d bytes; line skipped", r->origin, no, LB_LINE_MAX - 1);
    if (n && l[n - 1] == '\r')
        n--;
    if (n == 0)
        SKIP("%s line %u: empty line; skipped", r->origin, no);
    const char *eq = NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)l[i];
        if (c < 0x20 || c == 0x7f)
            SKIP("%s line %u: contains the non-printable byte 0x%x%s; line skipped", r->origin, no, c,
                 c == 0 ? " (NUL)" : c == '\r' ? " (CR)" : "");
        if (c == '=' && !eq)
            eq = l + i;
    }
    if (!eq)
        SKIP("%s line %u: no '=' (expected KEY=VALUE); line skipped", r->origin, no);
    size_t kn = (size_t)(eq - l);
    if (kn == 0)
        SKIP("%s line %u: empty key; line skipped", r->origin, no);
    for (size_t i = 0; i < kn; i++) {
        char c = l[i];
        int ok = c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9');
        if (!ok) {
            char kb[200];
            SKIP("%s line %u: key \"%s\" is not a variable name; line skipped", r->origin, no,
                 sanitize(l, kn, kb, sizeof kb));
        }
    }
    store(r, no, l, kn, eq + 1, n - kn - 1);
}

void lb_reader_feed(struct lb_reader *r, const char *p, size_t n)
{
    while (n && !r->stopped) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl ? (size_t)(nl - p) : n;
        /* Keep at most LB_LINE_MAX - 1 bytes; anything longer is only counted as over-long. */
        size_t room = (LB_LINE_MAX - 1) - r->len;
        if (take > room) {
            r->overlong = 1;
            memcpy(r->line + r->len, p, room);
            r->len += (uint32_t)room;
        } else {
            memcpy(r->line + r->len, p, take);
            r->len += (uint32_t)take;
        }
        if (!nl)
            return;
        p += take + 1;
        n -= take + 1;
        line_done(r, 1);
    }
}

void lb_reader_finish(struct lb_reader *r)
{
    if (!r->stopped && (r->len || r->overlong))
        line_done(r, 0);
}
