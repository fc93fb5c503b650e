/*
 * Modules and their kernels: the module table, a module's load and unload, its function handles,
 * and a kernel's simulated duration (launches and graph kernel nodes are priced here). A module's
 * global variables are charged to its context's device while it is loaded
 * (limitbed/modglobals.h says how they are sized).
 */
#include <stddef.h>
#include <string.h>

#include <limitbed/modglobals.h>

#include "cuda_internal.h"

#define FG_MAX_MODULES 64
#define FG_MOD_LIVE 0x4d4f4431u

/* A module is accepted whatever its image (nothing is compiled); any name is found in it.
 * FG_SPIN_KERNEL is the one name with a meaning: its first parameter (u64) is how long each wave
 * of its blocks runs, in ns, so a workload can give every launch its own duration — a real GPU's
 * kernels are not priced by their grid size — and the same spin kernel exists in PTX for real
 * GPUs (harness/gpu). */
typedef struct fg_module {
    uint32_t magic;
    struct { uint32_t magic; } fn;   /* the function handle every other name resolves to */
    struct { uint32_t magic; } spin; /* FG_SPIN_KERNEL */
    uint64_t globals;                /* device memory its global variables take (modglobals.h) */
    int dev;
    const fg_ctx *ctx;               /* unloaded with its context */
} fg_module;

static fg_module modules[FG_MAX_MODULES];

static fg_module *module_of(const void *h) {
    uintptr_t p = (uintptr_t)h, b = (uintptr_t)modules;
    if (p < b || p >= b + sizeof modules || (p - b) % sizeof modules[0])
        return NULL;
    fg_module *m = (fg_module *)h;
    return __atomic_load_n(&m->magic, __ATOMIC_ACQUIRE) == FG_MOD_LIVE ? m : NULL;
}

/* Its global variables take device memory of the context's device from the load on (an image
 * this cannot size — not PTX, an ELF cubin or a fatbin — takes none). */
CUresult fg_module_load(CUmodule *module, const void *image, size_t len) {
    fg_ctx *c;
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = fg_cu_need_ctx(&c)) != CUDA_SUCCESS)
        return r;
    uint64_t globals = 0;
    if (lb_module_globals(image, len, &globals) != 0)
        globals = 0;
    if (globals && (r = fg_mem_charge(c->dev, globals)) != CUDA_SUCCESS)
        return r;
    for (int i = 0; i < FG_MAX_MODULES; i++) {
        uint32_t expect = 0;
        if (__atomic_compare_exchange_n(&modules[i].magic, &expect, FG_MOD_LIVE, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            modules[i].globals = globals, modules[i].dev = c->dev, modules[i].ctx = c;
            modules[i].fn.magic = FG_MOD_LIVE;
            *module = (CUmodule)&modules[i];
            return CUDA_SUCCESS;
        }
    }
    if (globals)
        fg_mem_uncharge(c->dev, globals);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

FG_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image) { return fg_module_load(module, image, 0); }

static void unload(fg_module *m) {
    uint32_t live = FG_MOD_LIVE;
    if (__atomic_compare_exchange_n(&m->magic, &live, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED) && m->globals)
        fg_mem_uncharge(m->dev, m->globals);
}

CUresult fg_module_unload(CUmodule hmod) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    fg_module *m = module_of(hmod);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    unload(m);
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuModuleUnload(CUmodule hmod) { return fg_module_unload(hmod); }

/* Every module of a destroyed context goes with it. */
static void modules_ctx_gone(fg_ctx *c) {
    for (int i = 0; i < FG_MAX_MODULES; i++)
        if (__atomic_load_n(&modules[i].magic, __ATOMIC_ACQUIRE) == FG_MOD_LIVE && modules[i].ctx == c)
            unload(&modules[i]);
}
static const fg_cu_observer modules_observer = {.ctx_gone = modules_ctx_gone};
static void __attribute__((constructor)) modules_register(void) { fg_cu_observe(&modules_observer, FG_CU_STAGE_CONTEXT); }

FG_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!hfunc || !name)
        return CUDA_ERROR_INVALID_VALUE;
    fg_module *m = module_of(hmod);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    *hfunc = strcmp(name, FG_SPIN_KERNEL) ? (CUfunction)&m->fn : (CUfunction)&m->spin;
    return CUDA_SUCCESS;
}

static int is_spin(CUfunction f) {
    uintptr_t p = (uintptr_t)f, b = (uintptr_t)modules;
    return p >= b && p < b + sizeof modules && (p - b) % sizeof modules[0] == offsetof(fg_module, spin);
}

uint64_t fg_cu_kernel_ns(CUfunction f, uint64_t blocks, void **params, unsigned sm_count) {
    if (is_spin(f) && params && params[0]) {
        uint64_t ns, waves = sm_count ? (blocks + sm_count - 1) / sm_count : blocks;
        memcpy(&ns, params[0], sizeof ns);
        return ns * (waves ? waves : 1);
    }
    return fg_cu.cfg.launch_ns + fg_cu.cfg.block_ns * blocks;
}

uint64_t fg_cu_kernel_ns_here(CUfunction f, uint64_t blocks, void **params) {
    fg_ctx *c = fg_cu_current();
    return fg_cu_kernel_ns(f, blocks, params, c ? fg_cu.dev[c->dev].sm_count : 1);
}
