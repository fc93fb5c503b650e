/*
 * Module globals: a module's `__device__` variables are device memory the driver allocates when it
 * loads the module, as much as the program chose. Every load (cuModuleLoad, …Data, …DataEx,
 * …FatBinary, and CUDA 12's cuLibraryLoadData / cuLibraryLoadFromFile) is charged the globals of
 * its image (limitbed/modglobals.h reads PTX, ELF cubins and fatbins) on the current context's GPU
 * before the driver is called, refused when they do not fit, and released at the unload or with
 * the context. An image whose globals cannot be read (a compressed fatbin entry) is loaded
 * uncharged, with one WARN: docs/attacks.md lists it.
 *
 * Loads with globals are followed in a fixed table under a mutex (loads are rare); when it is
 * full such a load is refused.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "limitbed/modglobals.h"

#include "ctxcache.h"
#include "context.h"
#include "guard.h"
#include "init.h"
#include "log.h"
#include "region.h"
#include "symbols.h"

#define MAX_MODS 4096

struct mod {
    uintptr_t h; /* CUmodule or CUlibrary; 0: free */
    uintptr_t ctx;
    int dev;
    uint64_t bytes;
};

static struct mod g_mods[MAX_MODS];
static int g_pending;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void prepare(void) { pthread_mutex_lock(&g_mu); }
static void parent(void) { pthread_mutex_unlock(&g_mu); }
static void child(void)
{
    memset(g_mods, 0, sizeof g_mods); /* modules do not cross a fork */
    g_pending = 0;
    pthread_mutex_unlock(&g_mu);
}
static void __attribute__((constructor(101))) modules_register_fork(void) { pthread_atfork(prepare, parent, child); }

static int count_locked(void)
{
    int n = g_pending;
    for (int i = 0; i < MAX_MODS; i++)
        n += g_mods[i].h != 0;
    return n;
}

/* What a load is charged, before the driver sees it. */
struct load {
    int dev;
    uint64_t bytes;
    uintptr_t ctx;
};

/* 1: go ahead (l->bytes held, or 0: nothing to charge); 0: pass through untouched; -1: refused. */
static int load_begin(struct load *l, const void *image, size_t len, const char *api, const void *ra)
{
    int ord;
    l->bytes = 0;
    int e = lb_guard ? lb_guarded(ra) : lb_active();
    if (e == 0)
        return 0;
    uint64_t b;
    if (lb_module_globals(image, len, &b) != 0) {
        static _Atomic int logged;
        if (!atomic_exchange(&logged, 1))
            LB_WARN("%s: the globals of this module image cannot be read (a compressed fatbin?): loaded without "
                    "charging them",
                    api);
        b = 0;
    }
    if (!b)
        return 1;
    int cur = e > 0 ? lb_cur_mem(&l->dev, &ord) : LB_CUR_UNKNOWN;
    if (cur == LB_CUR_NONE)
        return 0; /* no context: the driver refuses a module; a library loads into none yet */
    if (cur != 0 || !lb_region) {
        LB_WARN("%s: module globals of %llu bytes refused: %s", api, (unsigned long long)b,
                !lb_region ? "no usage region" : e < 0 ? "called inside another CUDA call of the library" :
                "the library cannot tell which GPU the context is on");
        return -1;
    }
    lb_lock(&g_mu);
    int room = count_locked() < MAX_MODS;
    g_pending += room;
    lb_unlock(&g_mu);
    if (!room || !lb_region_reserve(l->dev, b)) {
        LB_WARN("%s: device %d: module globals of %llu bytes refused: %s", api, l->dev, (unsigned long long)b,
                !room ? "more than 4096 modules with globals" : "over the container's limit");
        if (room) {
            lb_lock(&g_mu);
            g_pending--;
            lb_unlock(&g_mu);
        }
        return -1;
    }
    l->bytes = b;
    l->ctx = lb_cur_ctx();
    return 1;
}

static CUresult load_end(const struct load *l, CUresult r, uintptr_t h)
{
    if (!l->bytes)
        return r;
    lb_lock(&g_mu);
    g_pending--;
    for (int i = 0; r == CUDA_SUCCESS && i < MAX_MODS; i++)
        if (!g_mods[i].h) {
            g_mods[i] = (struct mod){h, l->ctx, l->dev, l->bytes};
            break;
        }
    lb_unlock(&g_mu);
    if (r != CUDA_SUCCESS)
        lb_region_release(l->dev, l->bytes);
    return r;
}

static void unloaded(uintptr_t h)
{
    lb_lock(&g_mu);
    for (int i = 0; i < MAX_MODS; i++)
        if (g_mods[i].h == h) {
            lb_region_release(g_mods[i].dev, g_mods[i].bytes);
            memset(&g_mods[i], 0, sizeof g_mods[i]);
            break;
        }
    lb_unlock(&g_mu);
}

static void modules_ctx_gone(uintptr_t ctx)
{
    lb_lock(&g_mu);
    for (int i = 0; i < MAX_MODS; i++)
        if (g_mods[i].h && g_mods[i].ctx == ctx) {
            lb_region_release(g_mods[i].dev, g_mods[i].bytes);
            memset(&g_mods[i], 0, sizeof g_mods[i]);
        }
    lb_unlock(&g_mu);
}
static void __attribute__((constructor)) modules_ctx_gone_register(void) { lb_ctx_on_gone(LB_CTX_GONE_MODULES, modules_ctx_gone); }

#define LOAD(api, image, len, out, call)                                                                            \
    do {                                                                                                            \
        struct load l;                                                                                              \
        int st = load_begin(&l, image, len, api, __builtin_return_address(0));                                      \
        if (st < 0)                                                                                                 \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                        \
        if (st == 0)                                                                                                \
            return call;                                                                                            \
        lb_guard_enter();                                                                                           \
        CUresult r = call;                                                                                          \
        lb_guard_leave();                                                                                           \
        return load_end(&l, r, r == CUDA_SUCCESS && (out) ? (uintptr_t) * (out) : 0);                               \
    } while (0)


LB_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    REAL_OR_FAIL(cuModuleLoadData);
    LOAD("cuModuleLoadData", image, 0, module, real(module, image));
}

LB_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int n, CUjit_option *options,
                                      void **values)
{
    REAL_OR_FAIL(cuModuleLoadDataEx);
    LOAD("cuModuleLoadDataEx", image, 0, module, real(module, image, n, options, values));
}

LB_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    REAL_OR_FAIL(cuModuleLoadFatBinary);
    LOAD("cuModuleLoadFatBinary", fatCubin, 0, module, real(module, fatCubin));
}

LB_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jo, void **jv, unsigned int jn,
                                     CUlibraryOption *lo, void **lv, unsigned int ln)
{
    REAL_OR_FAIL(cuLibraryLoadData);
    LOAD("cuLibraryLoadData", code, 0, library, real(library, code, jo, jv, jn, lo, lv, ln));
}

/* A module file, mapped read-only for its globals to be read (no allocation in a hook). */
struct mapped {
    void *p;
    size_t len;
};

static struct mapped map_file(const char *path)
{
    struct mapped m = {NULL, 0};
    struct stat st;
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        m.p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        m.len = m.p == MAP_FAILED ? 0 : (size_t)st.st_size;
        if (m.p == MAP_FAILED)
            m.p = NULL;
    }
    if (fd >= 0)
        close(fd);
    return m;
}

static CUresult file_load(const char *api, const char *path, uintptr_t *out,
                          CUresult (*call)(const char *, uintptr_t *, void *), void *args, const void *ra)
{
    struct mapped m = map_file(path);
    struct load l;
    /* An unreadable file: the driver will say so; a readable one is charged what it holds. */
    int st = m.p ? load_begin(&l, m.p, m.len, api, ra) : 0;
    if (m.p)
        munmap(m.p, m.len);
    if (st < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (st == 0)
        return call(path, out, args);
    lb_guard_enter();
    CUresult r = call(path, out, args);
    lb_guard_leave();
    return load_end(&l, r, r == CUDA_SUCCESS ? *out : 0);
}

static CUresult call_module(const char *path, uintptr_t *out, void *real)
{
    CUmodule m = NULL;
    CUresult r = ((__typeof__(&cuModuleLoad))real)(&m, path);
    *out = (uintptr_t)m;
    return r;
}

LB_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    REAL_OR_FAIL(cuModuleLoad);
    if (!module)
        return real(module, fname);
    uintptr_t h = 0;
    CUresult r = file_load("cuModuleLoad", fname, &h, call_module, (void *)real, __builtin_return_address(0));
    if (r == CUDA_SUCCESS)
        *module = (CUmodule)h;
    return r;
}

struct lib_args {
    __typeof__(&cuLibraryLoadFromFile) real;
    CUjit_option *jo;
    void **jv;
    unsigned jn;
    CUlibraryOption *lo;
    void **lv;
    unsigned ln;
};

static CUresult call_library(const char *path, uintptr_t *out, void *args)
{
    struct lib_args *a = args;
    CUlibrary l = NULL;
    CUresult r = a->real(&l, path, a->jo, a->jv, a->jn, a->lo, a->lv, a->ln);
    *out = (uintptr_t)l;
    return r;
}

LB_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jo, void **jv,
                                         unsigned int jn, CUlibraryOption *lo, void **lv, unsigned int ln)
{
    REAL_OR_FAIL(cuLibraryLoadFromFile);
    if (!library)
        return real(library, fileName, jo, jv, jn, lo, lv, ln);
    struct lib_args a = {real, jo, jv, jn, lo, lv, ln};
    uintptr_t h = 0;
    CUresult r = file_load("cuLibraryLoadFromFile", fileName, &h, call_library, &a, __builtin_return_address(0));
    if (r == CUDA_SUCCESS)
        *library = (CUlibrary)h;
    return r;
}

LB_EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
    REAL_OR_FAIL(cuModuleUnload);
    CUresult r = real(hmod);
    if (r == CUDA_SUCCESS && hmod)
        unloaded((uintptr_t)hmod);
    return r;
}

LB_EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
    REAL_OR_FAIL(cuLibraryUnload);
    CUresult r = real(library);
    if (r == CUDA_SUCCESS && library)
        unloaded((uintptr_t)library);
    return r;
}
