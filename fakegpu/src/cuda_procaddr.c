/*
 * cuGetProcAddress and the generated stubs, both from cuda_api.def.
 *
 * CUDA >= 11.3 runtimes reach every driver function through cuGetProcAddress(name, version,
 * flags) rather than through the dynamic linker, so answering it exactly like the real driver
 * matters as much as exporting the symbols: the caller's version picks the newest variant it was
 * built for, and the per-thread-default-stream flag picks the _ptsz/_ptds variant.
 */
#include <string.h>

#include "cuda_internal.h"

/* Stubs: exported, answer CUDA_ERROR_NOT_SUPPORTED. Declared without parameters; callers pass
 * arguments in registers and the callee ignores them, which the C calling convention allows. */
#define FG_STUB_FN(sym)                                                                                                \
    FG_EXPORT CUresult sym(void);                                                                                      \
    FG_EXPORT CUresult sym(void) { return CUDA_ERROR_NOT_SUPPORTED; }
#define FG_PT_STUB_0(pt) FG_STUB_FN(pt)
#define FG_PT_STUB_1(pt)
#define FG_CUDA_IMPL(sym, pt)
#define FG_CUDA_STUB(sym, pt) FG_STUB_FN(sym) FG_CAT(FG_PT_STUB_, FG_IS_NONE(pt))(pt)
#define FG_CUDA(kind, name, ver, sym, pt) FG_CUDA_##kind(sym, pt)
#include "cuda_api.def"
#undef FG_CUDA
#define FG_STUB(sym) FG_STUB_FN(sym)
#include "cuda_stubs.def"
#undef FG_STUB

typedef struct proc {
    const char *name;
    int version;
    void *fn, *per_thread;
} proc;

#define FG_ADDR_0(pt) (void *)&pt
#define FG_ADDR_1(pt) NULL
static const proc table[] = {
#define FG_CUDA(kind, name, ver, sym, pt) {name, ver, (void *)&sym, FG_CAT(FG_ADDR_, FG_IS_NONE(pt))(pt)},
#include "cuda_api.def"
#undef FG_CUDA
};

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status) {
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    const proc *best = NULL;
    int named = 0;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, symbol) != 0)
            continue;
        named = 1;
        if (table[i].version <= cudaVersion && (!best || table[i].version > best->version))
            best = &table[i];
    }
    if (!best) {
        if (status)
            *status = named ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && best->per_thread ? best->per_thread : best->fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

/* Neither needs cuInit: the runtime fetches cuInit itself this way. */
FG_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}

FG_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus) {
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}
