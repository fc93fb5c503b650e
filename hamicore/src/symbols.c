/* Real driver symbols, resolved from the one table in hooks.def. Each library is dlopen'ed by
 * soname once (RTLD_LOCAL: our lookups must not change the application's global scope); a
 * symbol is looked up the first time it is needed, or all at once when cuGetProcAddress needs to
 * compare pointers. */
#include "symbols.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "hooktable.h"
#include "init.h"
#include "log.h"

_Atomic(void *) lb_real[LB_SYM_COUNT];

/* Our wrapper of each row (NULL for LB_NEED rows); names and versions are in hooktable.c. */
static void *const k_wrapper[LB_SYM_COUNT] = {
#define LB_HOOK(lib, name, sym, w, since, until, ptds) [LB_ID_##w] = (void *)&w,
#define LB_NEED(lib, sym) [LB_ID_##sym] = NULL,
#include "hooks.def"
#undef LB_HOOK
#undef LB_NEED
};
#define k_rows lb_hook_rows

static const char *const k_sonames[2] = {"libcuda.so.1", "libnvidia-ml.so.1"};
static void *g_handle[2];
static pthread_once_t g_lib_once[2] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};
static pthread_once_t g_all_once[2] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

typedef void *(*dlsym_fn)(void *, const char *);
static _Atomic(dlsym_fn) g_dlsym;

void *lb_real_dlsym(void *handle, const char *name)
{
    dlsym_fn f = atomic_load_explicit(&g_dlsym, memory_order_acquire);
    if (!f) {
        /* glibc 2.34 moved dlsym into libc with a new version; older ones have 2.2.5 (x86-64). */
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!f)
            f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        if (!f)
            f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17"); /* aarch64 */
        if (!f)
            return NULL;
        atomic_store_explicit(&g_dlsym, f, memory_order_release);
    }
    return f(handle, name);
}

static void open_cuda(void) { g_handle[LB_LIB_CUDA] = dlopen(k_sonames[LB_LIB_CUDA], RTLD_NOW | RTLD_LOCAL); }
static void open_nvml(void) { g_handle[LB_LIB_NVML] = dlopen(k_sonames[LB_LIB_NVML], RTLD_NOW | RTLD_LOCAL); }

static void *lib_handle(int lib)
{
    lb_guard_enter(); /* a driver's constructors may call dlsym/NVML while it loads */
    pthread_once(&g_lib_once[lib], lib == LB_LIB_CUDA ? open_cuda : open_nvml);
    lb_guard_leave();
    return g_handle[lib];
}

void *lb_sym_resolve(int id)
{
    void *h = lib_handle(k_rows[id].lib);
    void *p = h ? lb_real_dlsym(h, k_rows[id].symbol) : NULL;
    if (p)
        atomic_store_explicit(&lb_real[id], p, memory_order_relaxed);
    return p;
}

static void resolve_lib(int lib)
{
    for (int id = 0; id < LB_SYM_COUNT; id++)
        if (k_rows[id].lib == lib && !atomic_load_explicit(&lb_real[id], memory_order_relaxed))
            lb_sym_resolve(id);
}
static void resolve_cuda(void) { resolve_lib(LB_LIB_CUDA); }
static void resolve_nvml(void) { resolve_lib(LB_LIB_NVML); }

void *lb_sym_wrapper_by_name(const char *name)
{
    for (int id = 0; id < LB_SYM_COUNT; id++)
        if (k_wrapper[id] && strcmp(k_rows[id].symbol, name) == 0)
            return k_wrapper[id];
    return NULL;
}

void *lb_sym_wrap_ptr(int lib, void *p)
{
    pthread_once(&g_all_once[lib], lib == LB_LIB_CUDA ? resolve_cuda : resolve_nvml);
    for (int id = 0; id < LB_SYM_COUNT; id++)
        if (k_wrapper[id] && k_rows[id].lib == lib && atomic_load_explicit(&lb_real[id], memory_order_relaxed) == p) {
            LB_DEBUG("cuGetProcAddress: %s -> wrapper of %s", k_rows[id].name, k_rows[id].symbol);
            return k_wrapper[id];
        }
    return p;
}

void *lb_sym_wrap_proc(const char *name, int cudaVersion, cuuint64_t flags, void *p)
{
    void *w = lb_sym_wrap_ptr(LB_LIB_CUDA, p);
    if (w != p || !name)
        return w;
    int id = lb_hook_pick(name, cudaVersion, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0);
    if (id < 0)
        return p; /* not interposed */
    if (!atomic_load_explicit(&lb_real[id], memory_order_relaxed)) {
        /* Our wrapper would call an exported symbol the driver does not have. */
        LB_WARN("cuGetProcAddress(%s, %d): the driver's entry point is not its exported %s; passed through "
                "unlimited", name, cudaVersion, k_rows[id].symbol);
        return p;
    }
    LB_DEBUG("cuGetProcAddress(%s, %d): unknown entry point, matched by name -> wrapper of %s", name, cudaVersion,
             k_rows[id].symbol);
    return k_wrapper[id];
}
