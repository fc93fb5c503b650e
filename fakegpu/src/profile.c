/*
 * The profile parser. Strict on purpose: a typo in a test profile must fail loudly with the file,
 * the line and the fix, never silently give a different GPU.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <limitbed/nvml_abi.h>

#include "profile.h"

enum scope { S_GLOBAL, S_DEVICE, S_MIG };
enum type { T_STR, T_U64, T_UINT, T_CC, T_ARCH, T_ONOFF, T_GPU_UUID, T_MIG_UUID, T_PCI };

typedef struct key {
    const char *name;
    enum scope scope;
    enum type type;
    size_t off, len; /* offset in fg_profile / fg_device / fg_mig; len for strings */
    int required;
    uint64_t dflt;   /* what a missing key reads as (0: none) */
} key;

/* The table is keys.def (beside the Go reader, which parses the same file); CC's field is the
 * pair field_major, field_minor (profile.h). */
#define FG_STRUCT_GLOBAL fg_profile
#define FG_STRUCT_DEVICE fg_device
#define FG_STRUCT_MIG fg_mig
#define FG_MEMBER_STR(f) f
#define FG_MEMBER_GPU_UUID(f) f
#define FG_MEMBER_MIG_UUID(f) f
#define FG_MEMBER_PCI(f) f
#define FG_MEMBER_U64(f) f
#define FG_MEMBER_UINT(f) f
#define FG_MEMBER_ARCH(f) f
#define FG_MEMBER_ONOFF(f) f
#define FG_MEMBER_CC(f) f##_major
#define FG_KEY(scope, name, field, type, size, required, dflt)                                                 \
    {#name, S_##scope, T_##type, offsetof(FG_STRUCT_##scope, FG_MEMBER_##type(field)),                          \
     sizeof(((FG_STRUCT_##scope *)0)->FG_MEMBER_##type(field)), required, dflt},
static const key keys[] = {
#include "../profile/keys.def"
};
#define NKEYS (sizeof keys / sizeof keys[0])

/* Each key's index in keys[], by name: K_minor … (bit() of a key the reader itself looks at). */
enum key_index {
#define FG_KEY(scope, name, field, type, size, required, dflt) K_##name,
#include "../profile/keys.def"
};
_Static_assert(NKEYS <= 64, "a block's seen keys are the bits of a uint64_t");

/* Decimal digits into a 32-bit value; the end of them in *end. sscanf's %u would also take a
 * sign and leading spaces ("8. 6", "-8.6" wrapping to a huge major). */
static int parse_digits(const char *p, const char **end, unsigned *out)
{
    unsigned long long x = 0;
    const char *q = p;
    for (; *q >= '0' && *q <= '9'; q++)
        if ((x = x * 10 + (unsigned)(*q - '0')) > 0xffffffffULL)
            return -1;
    *end = q, *out = (unsigned)x;
    return q == p ? -1 : 0;
}

/* MAJOR.MINOR, digits only. */
static int parse_cc(const char *v, unsigned *maj, unsigned *min)
{
    const char *p;
    if (parse_digits(v, &p, maj) != 0 || *p != '.' || parse_digits(p + 1, &p, min) != 0 || *p)
        return -1;
    return 0;
}

static const struct { const char *name; unsigned v; } archs[] = {
    {"kepler", NVML_DEVICE_ARCH_KEPLER}, {"maxwell", NVML_DEVICE_ARCH_MAXWELL}, {"pascal", NVML_DEVICE_ARCH_PASCAL},
    {"volta", NVML_DEVICE_ARCH_VOLTA},   {"turing", NVML_DEVICE_ARCH_TURING},   {"ampere", NVML_DEVICE_ARCH_AMPERE},
    {"ada", NVML_DEVICE_ARCH_ADA},       {"hopper", NVML_DEVICE_ARCH_HOPPER},
};

typedef struct parser {
    const char *path;
    char *err;
    size_t errlen;
    int line;
    enum scope scope;
    int dev, mig;                                  /* current block */
    uint64_t gseen, dseen[FG_MAX_DEVICES], mseen[FG_MAX_DEVICES][FG_MAX_MIG];
    int dline[FG_MAX_DEVICES], mline[FG_MAX_DEVICES][FG_MAX_MIG];
} parser;

static int fail(parser *ps, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(parser *ps, int line, const char *fmt, ...) {
    int n = line > 0 ? snprintf(ps->err, ps->errlen, "profile %s line %d: ", ps->path, line)
                     : snprintf(ps->err, ps->errlen, "profile %s: ", ps->path);
    if (n < 0 || (size_t)n >= ps->errlen)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int parse_u64(const char *v, uint64_t *out) {
    if (!isdigit((unsigned char)v[0]))
        return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || *end)
        return -1;
    *out = x;
    return 0;
}

static int uuid_ok(const char *v, const char *prefix) {
    static const int groups[] = {8, 4, 4, 4, 12};
    size_t pl = strlen(prefix);
    if (strncmp(v, prefix, pl) != 0)
        return 0;
    v += pl;
    for (int g = 0; g < 5; g++) {
        for (int i = 0; i < groups[g]; i++, v++)
            if (!isxdigit((unsigned char)*v))
                return 0;
        if (*v != (g < 4 ? '-' : '\0'))
            return 0;
        v++;
    }
    return 1;
}

static int set_value(parser *ps, const key *k, char *base, const char *v) {
    void *field = base + k->off;
    uint64_t n;
    switch (k->type) {
    case T_GPU_UUID:
    case T_MIG_UUID: {
        const char *pre = k->type == T_GPU_UUID ? "GPU-" : "MIG-";
        if (!uuid_ok(v, pre))
            return fail(ps, ps->line, "%s: \"%s\" is not a UUID (write %sxxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, hex digits)",
                        k->name, v, pre);
    } /* fall through */
    case T_STR:
    case T_PCI:
        if (strlen(v) >= k->len || !*v)
            return fail(ps, ps->line, "%s: value must be 1 to %zu characters", k->name, k->len - 1);
        fg_copy(field, k->len, v);
        return 0;
    case T_U64:
    case T_UINT:
        if (parse_u64(v, &n) || (k->type == T_UINT && n > 0xffffffffULL))
            return fail(ps, ps->line, "%s: \"%s\" is not a whole number (write e.g. %s = 16384; 0x prefix for hex)",
                        k->name, v, k->name);
        if (k->type == T_U64)
            *(uint64_t *)field = n;
        else
            *(unsigned *)field = (unsigned)n;
        return 0;
    case T_CC: {
        unsigned maj, min;
        if (parse_cc(v, &maj, &min) != 0)
            return fail(ps, ps->line, "%s: \"%s\" is not MAJOR.MINOR (write e.g. %s = 8.6)", k->name, v, k->name);
        ((fg_device *)base)->cc_major = maj;
        ((fg_device *)base)->cc_minor = min;
        return 0;
    }
    case T_ARCH:
        for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
            if (strcmp(v, archs[i].name) == 0) {
                *(unsigned *)field = archs[i].v;
                return 0;
            }
        return fail(ps, ps->line, "architecture: unknown \"%s\" (known: kepler maxwell pascal volta turing ampere ada hopper)", v);
    case T_ONOFF:
        if (strcmp(v, "enabled") && strcmp(v, "disabled"))
            return fail(ps, ps->line, "%s: \"%s\" must be enabled or disabled", k->name, v);
        *(unsigned *)field = strcmp(v, "enabled") == 0;
        return 0;
    }
    return -1;
}

/* "device = N" and "mig = N" open blocks; everything else is a key of the current block. */
static int open_block(parser *ps, fg_profile *p, const char *k, const char *v) {
    uint64_t n;
    int is_dev = strcmp(k, "device") == 0;
    unsigned max = is_dev ? FG_MAX_DEVICES : FG_MAX_MIG;
    if (parse_u64(v, &n) || n >= max)
        return fail(ps, ps->line, "%s: \"%s\" is not an index 0..%u", k, v, max - 1);
    if (is_dev) {
        if (ps->dline[n])
            return fail(ps, ps->line, "device %llu defined twice (first at line %d): give each device its own index",
                        (unsigned long long)n, ps->dline[n]);
        ps->dline[n] = ps->line, ps->dev = (int)n, ps->scope = S_DEVICE;
        if (n + 1 > p->ndev)
            p->ndev = (unsigned)n + 1;
        return 0;
    }
    if (ps->scope == S_GLOBAL)
        return fail(ps, ps->line, "mig = %llu before any device: put it after the \"device = N\" line it belongs to",
                    (unsigned long long)n);
    fg_device *d = &p->dev[ps->dev];
    if (ps->mline[ps->dev][n])
        return fail(ps, ps->line, "mig %llu of device %d defined twice (first at line %d)", (unsigned long long)n,
                    ps->dev, ps->mline[ps->dev][n]);
    ps->mline[ps->dev][n] = ps->line, ps->mig = (int)n, ps->scope = S_MIG;
    if (n + 1 > d->nmig)
        d->nmig = (unsigned)n + 1;
    return 0;
}

static int known_keys(char *buf, size_t len, enum scope sc) {
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < NKEYS; i++)
        if (keys[i].scope == sc && used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? " " : "", keys[i].name);
    return 0;
}

static int parse_line(parser *ps, fg_profile *p, char *s) {
    char *hash = strchr(s, '#');
    if (hash)
        *hash = 0;
    char *eq = strchr(s, '=');
    char *k = s, *v = eq ? eq + 1 : NULL;
    if (eq)
        *eq = 0;
    while (isspace((unsigned char)*k)) k++;
    for (char *e = k + strlen(k); e > k && isspace((unsigned char)e[-1]);) *--e = 0;
    if (!*k && !v)
        return 0; /* blank or comment */
    if (!v || !*k)
        return fail(ps, ps->line, "expected \"key = value\", got \"%s\"", k);
    while (isspace((unsigned char)*v)) v++;
    for (char *e = v + strlen(v); e > v && isspace((unsigned char)e[-1]);) *--e = 0;
    if (strcmp(k, "device") == 0 || strcmp(k, "mig") == 0)
        return open_block(ps, p, k, v);
    for (size_t i = 0; i < NKEYS; i++) {
        const key *kk = &keys[i];
        if (strcmp(kk->name, k) != 0)
            continue;
        if (kk->scope != ps->scope) {
            static const char *where[] = {"before the first \"device = N\" line", "after \"device = N\" (before its mig blocks)",
                                          "after \"mig = N\""};
            return fail(ps, ps->line, "key \"%s\" is misplaced: it belongs %s", k, where[kk->scope]);
        }
        uint64_t *seen = ps->scope == S_GLOBAL   ? &ps->gseen
                         : ps->scope == S_DEVICE ? &ps->dseen[ps->dev]
                                                 : &ps->mseen[ps->dev][ps->mig];
        if (*seen & (1ULL << i))
            return fail(ps, ps->line, "key \"%s\" given twice in the same block: keep one", k);
        *seen |= 1ULL << i;
        char *base = ps->scope == S_GLOBAL   ? (char *)p
                     : ps->scope == S_DEVICE ? (char *)&p->dev[ps->dev]
                                             : (char *)&p->dev[ps->dev].mig[ps->mig];
        return set_value(ps, kk, base, v);
    }
    char known[600];
    known_keys(known, sizeof known, ps->scope);
    return fail(ps, ps->line, "unknown key \"%s\" (known: %s%s)", k, known,
                ps->scope == S_GLOBAL ? " device" : " device mig");
}

static uint64_t bit(enum key_index k) { return 1ULL << k; }

/* Every key of the scope the block has not seen and that has a default takes it. */
static void defaults(enum scope sc, uint64_t seen, char *base) {
    for (size_t i = 0; i < NKEYS; i++) {
        const key *k = &keys[i];
        if (k->scope != sc || !k->dflt || (seen & (1ULL << i)))
            continue;
        if (k->type == T_U64)
            *(uint64_t *)(base + k->off) = k->dflt;
        else
            *(unsigned *)(base + k->off) = (unsigned)k->dflt;
    }
}

/* Required keys, dense indexes, and the values derived from the others. */
static int finish(parser *ps, fg_profile *p) {
    for (size_t i = 0; i < NKEYS; i++)
        if (keys[i].scope == S_GLOBAL && keys[i].required && !(ps->gseen & (1ULL << i)))
            return fail(ps, 0, "missing required key \"%s\" (add a line \"%s = ...\" before the first device)",
                        keys[i].name, keys[i].name);
    defaults(S_GLOBAL, ps->gseen, (char *)p);
    if (p->ndev == 0)
        return fail(ps, 0, "no devices (add a block starting with \"device = 0\")");
    unsigned unit = p->ndev;
    for (unsigned d = 0; d < p->ndev; d++) {
        fg_device *dv = &p->dev[d];
        if (!ps->dline[d])
            return fail(ps, 0, "device %u is missing: device indexes must be 0..%u without gaps", d, p->ndev - 1);
        for (size_t i = 0; i < NKEYS; i++)
            if (keys[i].scope == S_DEVICE && keys[i].required && !(ps->dseen[d] & (1ULL << i)))
                return fail(ps, ps->dline[d], "device %u: missing required key \"%s\" (add \"%s = ...\" to its block)", d,
                            keys[i].name, keys[i].name);
        defaults(S_DEVICE, ps->dseen[d], (char *)dv);
        if (dv->memory_mib == 0)
            return fail(ps, ps->dline[d], "device %u: memory_mib must be above 0", d);
        if (!(ps->dseen[d] & bit(K_minor))) /* defaults to the index */
            dv->minor = d;
        if (!dv->pci_bus_id[0])
            snprintf(dv->pci_bus_id, sizeof dv->pci_bus_id, "00000000:%02X:00.0", d + 1);
        if (dv->nmig && (ps->dseen[d] & bit(K_mig_mode)) && !dv->mig_enabled)
            return fail(ps, ps->dline[d], "device %u: has mig blocks but mig_mode = disabled", d);
        if (dv->nmig)
            dv->mig_enabled = 1;
        dv->unit = d;
        uint64_t sum = 0;
        for (unsigned m = 0; m < dv->nmig; m++) {
            if (!ps->mline[d][m])
                return fail(ps, 0, "device %u: mig %u is missing: indexes must be 0..%u without gaps", d, m, dv->nmig - 1);
            for (size_t i = 0; i < NKEYS; i++)
                if (keys[i].scope == S_MIG && keys[i].required && !(ps->mseen[d][m] & (1ULL << i)))
                    return fail(ps, ps->mline[d][m], "device %u mig %u: missing required key \"%s\"", d, m, keys[i].name);
            fg_mig *mg = &dv->mig[m];
            defaults(S_MIG, ps->mseen[d][m], (char *)mg);
            char *g;
            unsigned long slices = strtoul(mg->profile, &g, 10);
            mg->slices = *g == 'g' && slices > 0 && slices <= 8 ? (unsigned)slices : 1; /* "1g.5gb" */
            if (!(ps->mseen[d][m] & bit(K_mig_copy_engines)))
                mg->copy_engines = mg->slices;
            sum += dv->mig[m].memory_mib;
            if (unit >= FG_MAX_UNITS)
                return fail(ps, ps->mline[d][m], "too many GPUs and MIG instances (at most %d)", FG_MAX_UNITS);
            dv->mig[m].unit = unit++;
        }
        if (sum > dv->memory_mib)
            return fail(ps, ps->dline[d], "device %u: MIG instances hold %llu MiB, more than memory_mib", d,
                        (unsigned long long)sum);
    }
    p->nunits = unit;
    if (!p->nvml_version[0])
        snprintf(p->nvml_version, sizeof p->nvml_version, "12.%.28s", p->driver_version);
    return 0;
}

int fg_profile_parse(const char *path, const char *text, fg_profile *p, char *err, size_t errlen) {
    static parser zero;
    parser *ps = malloc(sizeof *ps);
    if (!ps) {
        snprintf(err, errlen, "profile %s: out of memory", path);
        return -1;
    }
    *ps = zero;
    ps->path = path, ps->err = err, ps->errlen = errlen;
    memset(p, 0, sizeof *p);
    fg_copy(p->path, sizeof p->path, path);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t bl = strcspn(base, ".");
    snprintf(p->name, sizeof p->name, "%.*s", (int)(bl < sizeof p->name ? bl : sizeof p->name - 1), base);
    int rc = 0;
    char line[1024];
    for (const char *s = text; *s && rc == 0;) {
        size_t n = strcspn(s, "\n");
        ps->line++;
        if (n >= sizeof line)
            rc = fail(ps, ps->line, "line longer than %zu characters", sizeof line - 1);
        else {
            memcpy(line, s, n);
            line[n] = 0;
            rc = parse_line(ps, p, line);
        }
        s += n + (s[n] == '\n');
    }
    if (rc == 0)
        rc = finish(ps, p);
    free(ps);
    return rc;
}

int fg_profile_load(const char *path, fg_profile *p, char *err, size_t errlen) {
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errlen, "profile %s: cannot open: %s (set FAKEGPU_PROFILE to a profile name or path)", path,
                 strerror(errno));
        return -1;
    }
    char *text = malloc(1 << 20);
    size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (!text) {
        snprintf(err, errlen, "profile %s: out of memory", path);
        return -1;
    }
    text[n] = 0;
    int rc = fg_profile_parse(path, text, p, err, errlen);
    free(text);
    return rc;
}

int fg_uuid_bytes(const char *uuid, unsigned char out[16]) {
    const char *s = strchr(uuid, '-');
    int n = 0;
    for (s = s ? s + 1 : uuid; *s && n < 32; s++) {
        if (*s == '-')
            continue;
        if (!isxdigit((unsigned char)*s))
            return -1;
        int v = isdigit((unsigned char)*s) ? *s - '0' : (tolower((unsigned char)*s) - 'a' + 10);
        out[n / 2] = (unsigned char)(n % 2 ? (out[n / 2] | v) : (v << 4));
        n++;
    }
    return n == 32 ? 0 : -1;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ULL;
    return h;
}

uint64_t fg_profile_identity(const fg_profile *p) {
    uint64_t h = 14695981039346656037ULL;
    for (unsigned d = 0; d < p->ndev; d++) {
        const fg_device *dv = &p->dev[d];
        h = fnv(h, dv->uuid, strlen(dv->uuid));
        h = fnv(h, &dv->memory_mib, sizeof dv->memory_mib);
        for (unsigned m = 0; m < dv->nmig; m++) {
            h = fnv(h, dv->mig[m].uuid, strlen(dv->mig[m].uuid));
            h = fnv(h, &dv->mig[m].memory_mib, sizeof dv->mig[m].memory_mib);
        }
    }
    return h;
}
