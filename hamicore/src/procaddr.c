/* cuGetProcAddress: CUDA >= 11.3 runtimes fetch every driver entry point through it (the CUDA 13
 * runtime asks for cuLaunchKernel at versions 4000 and 7000, cuLaunchKernelEx at 11060), so only
 * interposing exported symbols would be bypassed. We let the driver pick the entry point for the
 * requested name/version/flags, then, if it is one of the real entries of our table, hand back
 * our wrapper for that exact versioned symbol (_v2, _v3, _ptsz ... come out right for free).
 * A pointer that is none of them (a driver handing out an internal alias) is matched by the
 * requested name, version and flags instead (hooktable.h).
 *
 * Our wrapper of each row of hooks.def lives here too, with the lookups through it (this file's
 * cuGetProcAddress, dlsym.c's dlsym): the one file that names every wrapper, above all of them. */
#include "procaddr.h"

#include <stdatomic.h>
#include <string.h>

#include "hooktable.h"
#include "init.h"
#include "log.h"
#include "symbols.h"

/* Our wrapper of each row (NULL for LB_NEED rows); names and versions are in hooktable.c. */
static void *const k_wrapper[LB_SYM_COUNT] = {
#define LB_HOOK(lib, name, sym, w, since, until, ptds) [LB_ID_##w] = (void *)&w,
#define LB_NEED(lib, sym) [LB_ID_##sym] = NULL,
#include "hooks.def"
#undef LB_HOOK
#undef LB_NEED
};
static _Atomic int g_all_done[2];

static void resolve_lib(int lib)
{
    for (int id = 0; id < LB_SYM_COUNT; id++)
        if (lb_hook_rows[id].lib == lib && !atomic_load_explicit(&lb_real[id], memory_order_relaxed))
            lb_sym_resolve(id);
}

void *lb_sym_wrapper_by_name(const char *name)
{
    for (int id = 0; id < LB_SYM_COUNT; id++)
        if (k_wrapper[id] && strcmp(lb_hook_rows[id].symbol, name) == 0)
            return k_wrapper[id];
    return NULL;
}

void *lb_sym_wrap_ptr(int lib, void *p)
{
    if (!atomic_load_explicit(&g_all_done[lib], memory_order_acquire)) { /* idempotent: racing is harmless */
        resolve_lib(lib);
        atomic_store_explicit(&g_all_done[lib], 1, memory_order_release);
    }
    for (int id = 0; id < LB_SYM_COUNT; id++)
        if (k_wrapper[id] && lb_hook_rows[id].lib == lib && atomic_load_explicit(&lb_real[id], memory_order_relaxed) == p) {
            LB_DEBUG("cuGetProcAddress: %s -> wrapper of %s", lb_hook_rows[id].name, lb_hook_rows[id].symbol);
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
                "unlimited", name, cudaVersion, lb_hook_rows[id].symbol);
        return p;
    }
    LB_DEBUG("cuGetProcAddress(%s, %d): unknown entry point, matched by name -> wrapper of %s", name, cudaVersion,
             lb_hook_rows[id].symbol);
    return k_wrapper[id];
}


LB_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    __typeof__(&cuGetProcAddress) real = LB_REAL(cuGetProcAddress);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn && *pfn && !(lb_guard && lb_from_driver(__builtin_return_address(0))))
        *pfn = lb_sym_wrap_proc(symbol, cudaVersion, flags, *pfn);
    return r;
}

LB_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus)
{
    __typeof__(&cuGetProcAddress_v2) real = LB_REAL(cuGetProcAddress_v2);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn && *pfn && !(lb_guard && lb_from_driver(__builtin_return_address(0))))
        *pfn = lb_sym_wrap_proc(symbol, cudaVersion, flags, *pfn);
    return r;
}

LB_EXPORT CUresult cuInit(unsigned int flags)
{
    lb_active(); /* attach the region before the first allocation can race for it */
    __typeof__(&cuInit) real = LB_REAL(cuInit);
    return real ? real(flags) : CUDA_ERROR_NOT_FOUND;
}
