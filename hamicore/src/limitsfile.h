/*
 * The limits FILE (/overrideEnv) and its resolution against the environment — not the compute
 * limiter (limiter.h). Split by concern:
 *   limitsfile_vars.c       the variables, their names, the memory grammar, diagnostics
 *   limitsfile_reader.c     the streaming line reader
 *   limitsfile_resolve.c    file + environment -> configuration
 *   limitsfile_canonical.c  the forms the shared test vectors compare
 *
 * The loader is a PURE function of (file bytes, environment lookup) → configuration plus
 * diagnostics. No I/O, no allocation, no global state: the library, the unit tests and the fuzz
 * target all drive the same code, and config.c does the (only) file I/O around it.
 *
 * The file is read line by line through a streaming reader so that a file larger than any buffer
 * (e.g. one with a 1 MiB line) is handled in fixed memory: an over-long line is counted, skipped
 * and never stored.
 */
#ifndef LB_LIMITSFILE_H
#define LB_LIMITSFILE_H

#include <stddef.h>
#include <stdint.h>

#include "limitbed/region.h"
#include "loglevel.h"

#define LB_MAX_DEVICES LB_REGION_MAX_DEVICES
#define LB_LINE_MAX 4096   /* longest accepted line INCLUDING its LF (docs/limits-file.md) */
#define LB_POOL_SIZE 65536 /* bytes of accepted values kept from one file */
#define LB_MAX_OTHER 16    /* variables libvgpu does not read, kept for diagnostics/vectors */
#define LB_MAX_DIAGS 48
#define LB_MSG_MAX 200
#define LB_DEFAULT_CACHE "/tmp/cudevshr.cache"


enum lb_source { LB_SRC_NONE = 0, LB_SRC_FILE = 1, LB_SRC_ENV = 2, LB_SRC_DEFAULT = 3 };

/* Every variable libvgpu reads. The indexed forms take 16 consecutive ids. */
enum lb_var {
    LB_VAR_MEM = 0,                                /* CUDA_DEVICE_MEMORY_LIMIT */
    LB_VAR_MEM_DEV0 = 1,                           /* CUDA_DEVICE_MEMORY_LIMIT_<i> */
    LB_VAR_SM = LB_VAR_MEM_DEV0 + LB_MAX_DEVICES,  /* CUDA_DEVICE_SM_LIMIT */
    LB_VAR_SM_DEV0,                                /* CUDA_DEVICE_SM_LIMIT_<i> */
    LB_VAR_CACHE = LB_VAR_SM_DEV0 + LB_MAX_DEVICES, /* CUDA_DEVICE_MEMORY_SHARED_CACHE */
    LB_VAR_OVERSUBSCRIBE,                          /* CUDA_OVERSUBSCRIBE */
    LB_VAR_POLICY,                                 /* GPU_CORE_UTILIZATION_POLICY */
    LB_VAR_PRIORITY,                               /* CUDA_TASK_PRIORITY */
    LB_VAR_LOG_LEVEL,                              /* LIBCUDA_LOG_LEVEL */
    LB_VAR_HOSTPID_BROKER,                         /* LIBVGPU_HOSTPID_BROKER */
    LB_VAR_FORMAT,                                 /* HAMI_LIMITS_FORMAT */
    LB_VAR_COUNT
};

struct lb_val {
    uint32_t off, len; /* value bytes in the pool */
    uint32_t line;     /* 1-based line it came from */
    uint8_t set;       /* an accepted line set it */
    uint8_t rejected;  /* a line for it was rejected (memory value that does not parse) */
};

/* What one limits file says. */
struct lb_file_vars {
    struct lb_val var[LB_VAR_COUNT];
    struct {
        uint32_t koff, klen;
        struct lb_val v;
    } other[LB_MAX_OTHER];
    uint32_t nother;
    uint32_t lines;    /* lines seen */
    uint32_t skipped;  /* lines skipped */
    uint32_t pool_used;
    char pool[LB_POOL_SIZE];
};

struct lb_diag {
    uint8_t level;
    uint8_t skipped_line; /* this diagnostic reports a skipped line (line is its number) */
    uint32_t line;
    char msg[LB_MSG_MAX];
};

/* Diagnostics are collected, not printed: the log level is only known once the file (which may
 * set LIBCUDA_LOG_LEVEL) and the environment have been read. */
struct lb_diags {
    struct lb_diag d[LB_MAX_DIAGS];
    uint32_t n;
    uint32_t dropped;
};

struct lb_reader {
    struct lb_file_vars *fv;
    struct lb_diags *dg;
    const char *origin; /* name used in messages, e.g. "/overrideEnv" */
    uint32_t len;
    uint8_t overlong;
    uint8_t legacy;  /* HAMi-core v2.10 reader: stop at the first line without '=', keep CR */
    uint8_t stopped; /* legacy reader hit its stop condition */
    char line[LB_LINE_MAX];
};

/* The resolved configuration. */
struct lb_config {
    uint64_t mem_limit[LB_MAX_DEVICES]; /* bytes; LB_MEM_UNLIMITED; 0 = refuse (rejected value) */
    uint8_t mem_src[LB_MAX_DEVICES];    /* lb_source of each device's limit */
    uint32_t sm_limit[LB_MAX_DEVICES];  /* 1..100; 100 = no compute limit */
    char cache_path[LB_LINE_MAX];
    uint8_t cache_src;
    uint8_t oversubscribe;
    uint8_t policy;   /* LB_POLICY_* */
    uint8_t hostpid_broker;
    int8_t log_level;
    int32_t priority;
    uint32_t format;  /* HAMI_LIMITS_FORMAT, 0 = not given */
    char unusable[320]; /* set: /overrideEnv exists but cannot be read (why); every allocation is refused */
};

typedef const char *(*lb_getenv_fn)(const char *name, void *ctx);

const char *lb_var_name(int var, char *buf, size_t size);
/* Key -> variable id; -1 for a key libvgpu does not read (incl. indexes >= 16). */
int lb_var_lookup(const char *k, size_t n);
int lb_var_is_memory(int var);

void lb_diag_add(struct lb_diags *dg, int level, uint32_t line, int skipped_line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

void lb_reader_init(struct lb_reader *r, struct lb_file_vars *fv, struct lb_diags *dg, const char *origin,
                    int legacy);
void lb_reader_feed(struct lb_reader *r, const char *p, size_t n);
void lb_reader_finish(struct lb_reader *r);

/* fv == NULL: no file (env mode): everything from the environment, as upstream. fv != NULL (file
 * mode): the file alone governs every variable but LIBCUDA_LOG_LEVEL, which the environment may
 * set; a key the file lacks takes the library's default, never the environment's value. */
void lb_resolve(const struct lb_file_vars *fv, lb_getenv_fn env, void *ctx, int legacy, struct lb_config *cfg,
                struct lb_diags *dg);

/* The whole pure pipeline over one buffer (buf == NULL: no file). fv is caller-provided scratch. */
void lb_load(const char *buf, size_t len, const char *origin, lb_getenv_fn env, void *ctx,
             struct lb_file_vars *fv, struct lb_config *cfg, struct lb_diags *dg);

/* `[0-9]+[kKmMgG]?`, decimal, binary multipliers; 0 = ok, -1 = rejected (junk or overflow). */
int lb_parse_memory(const char *s, size_t n, uint64_t *out);
/* HAMi-core v2.10's parser (base-0 strtoul, last character as suffix, 0 on overflow). */
uint64_t lb_parse_memory_legacy(const char *s);

/* limitsfile_canonical.c, built into the unit tests and the fuzzer only (not libvgpu.so).
 * The accepted variables of a file as sorted KEY=VALUE lines, memory values in bytes (the
 * parsed.env form of testdata/limits). Returns the length (truncated to size-1). */
size_t lb_file_vars_canonical(const struct lb_file_vars *fv, char *buf, size_t size);
/* The resolved configuration in the resolved.env form of testdata/limits. */
size_t lb_config_canonical(const struct lb_config *cfg, char *buf, size_t size);

#endif
