/* Real driver symbols, resolved from the one table in hooks.def. Each library is dlopen'ed by
 * soname once (RTLD_LOCAL: our lookups must not change the application's global scope); a
 * symbol is looked up the first time it is needed, or all at once when cuGetProcAddress needs to
 * compare pointers. */
#include "symbols.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "hooktable.h"
#include "init.h"
#include "log.h"

_Atomic(void *) lb_real[LB_SYM_COUNT];
/* guard.h's per-thread guard: defined with the bottom layer every hook uses. */
_Thread_local int lb_guard __attribute__((tls_model("initial-exec")));

#define k_rows lb_hook_rows

static const char *const k_sonames[2] = {"libcuda.so.1", "libnvidia-ml.so.1"};
static void *g_handle[2];
/* Each library is opened once, under its own mutex rather than a pthread_once: the fork handlers
 * below hold it across fork, so a child forked while another thread loads the driver never
 * inherits a once-flag stuck "in progress" (glibc restarts such a once in the child; other
 * implementations, e.g. sanitizer runtimes', do not). The CUDA driver may load NVML while it
 * loads: CUDA's mutex comes first. */
static pthread_mutex_t g_lib_mu[2] = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};
static _Atomic int g_lib_done[2];

static void fork_prepare(void)
{
    pthread_mutex_lock(&g_lib_mu[LB_LIB_CUDA]);
    pthread_mutex_lock(&g_lib_mu[LB_LIB_NVML]);
}
static void fork_parent(void)
{
    pthread_mutex_unlock(&g_lib_mu[LB_LIB_NVML]);
    pthread_mutex_unlock(&g_lib_mu[LB_LIB_CUDA]);
}
static void __attribute__((constructor(101))) symbols_register_fork(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_parent); /* the child's are this thread's too */
}

static _Atomic(dlsym_fn) g_dlsym;

/* Uninstrumented: reached from sanitizer runtimes before they are initialised (dlsym.c). */
__attribute__((no_sanitize_address, no_sanitize_thread, no_sanitize_undefined)) dlsym_fn lb_real_dlsym_fn(void)
{
    dlsym_fn f = atomic_load_explicit(&g_dlsym, memory_order_acquire);
    if (!f) {
        /* glibc 2.34 moved dlsym into libc with a new version; older ones have 2.2.5 (x86-64). */
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!f)
            f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        if (!f)
            f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17"); /* aarch64 */
        if (f)
            atomic_store_explicit(&g_dlsym, f, memory_order_release);
    }
    return f;
}

__attribute__((no_sanitize_address, no_sanitize_thread, no_sanitize_undefined)) void *lb_real_dlsym(void *handle,
                                                                                           const char *name)
{
    dlsym_fn f = lb_real_dlsym_fn();
    return f ? f(handle, name) : NULL;
}

/* NVML from where the CUDA driver the program loaded lives, first: the two ship together, and a
 * process may find libcuda.so.1 through its own RUNPATH where a plain dlopen of
 * libnvidia-ml.so.1 looks in the default directories only (and may find another driver's). */
static void *beside_cuda(const char *soname)
{
    void *cuda = g_handle[LB_LIB_CUDA]; /* opened before NVML's mutex was taken (lock order) */
    void *sym = cuda ? lb_real_dlsym(cuda, "cuInit") : NULL;
    Dl_info info;
    char path[4096];
    if (!sym || !dladdr(sym, &info) || !info.dli_fname)
        return NULL;
    const char *slash = strrchr(info.dli_fname, '/');
    size_t dir = slash ? (size_t)(slash - info.dli_fname) : 0;
    if (!slash || dir + 1 + strlen(soname) >= sizeof path)
        return NULL;
    memcpy(path, info.dli_fname, dir + 1);
    strcpy(path + dir + 1, soname);
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

/* The executable segments of each loaded driver library and of this one, for lb_from_driver.
 * Written once, when a library is loaded (dl_iterate_phdr takes the loader's lock: never from a
 * hook's window). Our own: a driver entry point that tail-calls its own export leaves our call
 * site as the return address. */
#define MAX_TEXT 8
#define SELF 2
static _Atomic uintptr_t g_text[3][MAX_TEXT][2];
static _Atomic int g_ntext[3];

struct text_find {
    uintptr_t base;
    int lib;
};

static int note_segments(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct text_find *f = arg;
    if (info->dlpi_addr != f->base)
        return 0;
    int n = 0;
    for (int i = 0; i < info->dlpi_phnum && n < MAX_TEXT; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        atomic_store(&g_text[f->lib][n][0], info->dlpi_addr + ph->p_vaddr);
        atomic_store(&g_text[f->lib][n][1], info->dlpi_addr + ph->p_vaddr + ph->p_memsz);
        n++;
    }
    atomic_store_explicit(&g_ntext[f->lib], n, memory_order_release);
    return 1;
}

static void note_text(int lib, void *handle)
{
    struct link_map *lm = NULL;
    if (!handle || dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm)
        return;
    struct text_find f = {lm->l_addr, lib};
    dl_iterate_phdr(note_segments, &f);
    Dl_info self;
    if (!atomic_load(&g_ntext[SELF]) && dladdr((void *)&note_text, &self) && self.dli_fbase) {
        /* A shared object's first segment is at address 0: its base is its load bias. */
        struct text_find me = {(uintptr_t)self.dli_fbase, SELF};
        dl_iterate_phdr(note_segments, &me);
    }
}

__attribute__((no_sanitize_address, no_sanitize_thread, no_sanitize_undefined)) int lb_from_driver(const void *ra)
{
    uintptr_t a = (uintptr_t)ra;
    for (int lib = 0; lib < 3; lib++) {
        int n = atomic_load_explicit(&g_ntext[lib], memory_order_acquire);
        for (int i = 0; i < n; i++)
            if (a >= atomic_load_explicit(&g_text[lib][i][0], memory_order_relaxed) &&
                a < atomic_load_explicit(&g_text[lib][i][1], memory_order_relaxed))
                return 1;
    }
    return 0;
}

static void *lib_handle(int lib)
{
    if (__builtin_expect(!atomic_load_explicit(&g_lib_done[lib], memory_order_acquire), 0)) {
        if (lib == LB_LIB_NVML)
            (void)lib_handle(LB_LIB_CUDA); /* CUDA's mutex comes first (beside_cuda) */
        lb_guard_enter(); /* a driver's constructors may call dlsym/NVML while it loads */
        pthread_mutex_lock(&g_lib_mu[lib]);
        if (!atomic_load_explicit(&g_lib_done[lib], memory_order_relaxed)) {
            if (lib == LB_LIB_NVML)
                g_handle[lib] = beside_cuda(k_sonames[lib]);
            if (!g_handle[lib])
                g_handle[lib] = dlopen(k_sonames[lib], RTLD_NOW | RTLD_LOCAL);
            note_text(lib, g_handle[lib]);
            atomic_store_explicit(&g_lib_done[lib], 1, memory_order_release);
        }
        pthread_mutex_unlock(&g_lib_mu[lib]);
        lb_guard_leave();
    }
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
