/*
 * The other ways to load a module, all through fg_module_load (cuda_kernels.c), so each charges
 * the device memory of the image's globals: cuModuleLoadDataEx (JIT options ignored),
 * cuModuleLoad (a file), cuModuleLoadFatBinary, and the context-independent libraries of CUDA 12
 * (cuLibraryLoadData, cuLibraryLoadFromFile), which load into the current context here: the fake
 * needs one, where the driver would load into every context lazily.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define FG_MAX_LIBRARIES 64

FG_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                      CUjit_option *options, void **optionValues) {
    (void)numOptions, (void)options, (void)optionValues;
    return fg_module_load(module, image, 0);
}

FG_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) {
    return fg_module_load(module, fatCubin, 0);
}

/* The whole file, NUL-terminated (PTX is text); NULL when it cannot be read. */
static char *slurp(const char *path, size_t *len) {
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (n + 65536 + 1 > cap) {
            char *b = realloc(buf, cap = (n + 65536 + 1) * 2);
            if (!b) {
                free(buf), fclose(f);
                return NULL;
            }
            buf = b;
        }
        got = fread(buf + n, 1, 65536, f);
        n += got;
    } while (got > 0);
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

static CUresult load_file(CUmodule *module, const char *fname) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    size_t len;
    char *img = slurp(fname, &len);
    if (!img)
        return CUDA_ERROR_FILE_NOT_FOUND;
    r = fg_module_load(module, img, len);
    free(img);
    return r;
}

FG_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname) { return load_file(module, fname); }

/* A library is one module of the current context. */
static CUmodule libraries[FG_MAX_LIBRARIES];

static CUresult library_of(CUlibrary *library, CUmodule m) {
    pthread_mutex_lock(&fg_cu.mu);
    for (int i = 0; i < FG_MAX_LIBRARIES; i++)
        if (!libraries[i]) {
            libraries[i] = m;
            *library = (CUlibrary)&libraries[i];
            pthread_mutex_unlock(&fg_cu.mu);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&fg_cu.mu);
    fg_module_unload(m);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

FG_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                     void **jitOptionsValues, unsigned int numJitOptions,
                                     CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                     unsigned int numLibraryOptions) {
    (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
    (void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
    if (!library)
        return fg_cu_ready() ? fg_cu_ready() : CUDA_ERROR_INVALID_VALUE;
    CUmodule m;
    CUresult r = fg_module_load(&m, code, 0);
    return r == CUDA_SUCCESS ? library_of(library, m) : r;
}

FG_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                                         void **jitOptionsValues, unsigned int numJitOptions,
                                         CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                         unsigned int numLibraryOptions) {
    (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
    (void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
    if (!library)
        return fg_cu_ready() ? fg_cu_ready() : CUDA_ERROR_INVALID_VALUE;
    CUmodule m;
    CUresult r = load_file(&m, fileName);
    return r == CUDA_SUCCESS ? library_of(library, m) : r;
}

FG_EXPORT CUresult cuLibraryUnload(CUlibrary library) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    CUmodule *slot = (CUmodule *)library;
    uintptr_t p = (uintptr_t)slot, b = (uintptr_t)libraries;
    if (!slot || p < b || p >= b + sizeof libraries || (p - b) % sizeof libraries[0])
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&fg_cu.mu);
    CUmodule m = *slot;
    *slot = NULL;
    pthread_mutex_unlock(&fg_cu.mu);
    return m ? fg_module_unload(m) : CUDA_ERROR_INVALID_HANDLE;
}

/* The fake keeps no symbols of an image: no global is found by name. */
FG_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name) {
    (void)dptr, (void)bytes, (void)hmod;
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    return name ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_INVALID_VALUE;
}
