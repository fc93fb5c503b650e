/*
 * The built libcuda.so.1 and libnvidia-ml.so.1, loaded like a user would: every row of
 * cuda_api.def resolves through cuGetProcAddress to the same function dlsym finds, every NVML
 * name is exported, and the driver answers argument and state errors with the real codes.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <limitbed/cuda_abi.h>

#include "check.h"
#include "nvml_names.h"

static const struct row {
    const char *name;
    int version;
    const char *sym, *pt;
} rows[] = {
#define FG_CUDA(kind, name, ver, sym, pt) {name, ver, #sym, #pt},
#include "cuda_api.def"
#undef FG_CUDA
};

typedef CUresult (*gpa_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void *lib(const char *name) {
    char p[600];
    const char *dir = getenv("FAKEGPU_TEST_LIB");
    snprintf(p, sizeof p, "%s/%s", dir ? dir : ".", name);
    void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    CHECK_MSG(h != NULL, "dlopen %s: %s", p, dlerror());
    return h;
}

static void table(void *h, gpa_t gpa) {
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const struct row *r = &rows[i];
        void *want = dlsym(h, r->sym), *got = NULL;
        CUdriverProcAddressQueryResult st = 99;
        CHECK_MSG(want != NULL, "%s not exported", r->sym);
        CHECK_MSG(gpa(r->name, &got, r->version, 0, &st) == CUDA_SUCCESS && got == want && st == 0,
                  "%s@%d should be %s", r->name, r->version, r->sym);
        if (strcmp(r->pt, "NONE") != 0) {
            void *pw = dlsym(h, r->pt);
            CHECK_MSG(pw && gpa(r->name, &got, r->version, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st) == 0 &&
                          got == pw,
                      "%s@%d per-thread should be %s", r->name, r->version, r->pt);
        }
    }
}

static void *get(gpa_t gpa, const char *name, int version, cuuint64_t flags, CUresult *rc, int *status) {
    void *p = (void *)1;
    CUdriverProcAddressQueryResult st = 99;
    *rc = gpa(name, &p, version, flags, &st);
    *status = (int)st;
    return p;
}

static void rules(void *h, gpa_t gpa) {
    CUresult rc;
    int st;
    CHECK(get(gpa, "cuMemAlloc", 3020, 0, &rc, &st) == dlsym(h, "cuMemAlloc_v2"));
    CHECK(get(gpa, "cuMemAlloc", 12040, 0, &rc, &st) == dlsym(h, "cuMemAlloc_v2"));
    CHECK(get(gpa, "cuMemAlloc", 3010, 0, &rc, &st) == dlsym(h, "cuMemAlloc"));
    CHECK(get(gpa, "cuGetProcAddress", 12000, 0, &rc, &st) == dlsym(h, "cuGetProcAddress_v2"));
    CHECK(get(gpa, "cuGetProcAddress", 11030, 0, &rc, &st) == dlsym(h, "cuGetProcAddress"));
    CHECK(get(gpa, "cuLaunchKernel", 4000, 0, &rc, &st) == dlsym(h, "cuLaunchKernel"));
    CHECK(get(gpa, "cuLaunchKernel", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &rc, &st) ==
          dlsym(h, "cuLaunchKernel_ptsz"));
    CHECK(get(gpa, "cuLaunchKernel", 7000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &rc, &st) == dlsym(h, "cuLaunchKernel"));
    CHECK(get(gpa, "cuCtxCreate", 12000, 0, &rc, &st) == dlsym(h, "cuCtxCreate_v3"));
    CHECK(get(gpa, "cuNoSuchThing", 12000, 0, &rc, &st) == NULL && rc == CUDA_ERROR_NOT_FOUND &&
          st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    CHECK(get(gpa, "cuMemAllocAsync", 11000, 0, &rc, &st) == NULL && rc == CUDA_ERROR_NOT_FOUND &&
          st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    CHECK(get(gpa, "cuMemAlloc_v2", 12000, 0, &rc, &st) == NULL && rc == CUDA_ERROR_NOT_FOUND); /* names, not symbols */
    CHECK(get(gpa, "cuMemAlloc", 12000, 1u << 7, &rc, &st) == NULL && rc == CUDA_ERROR_INVALID_VALUE);
    void *p;
    CHECK(gpa(NULL, &p, 12000, 0, NULL) == CUDA_ERROR_INVALID_VALUE);
    CHECK(gpa("cuInit", NULL, 12000, 0, NULL) == CUDA_ERROR_INVALID_VALUE);
    CHECK(gpa("cuInit", &p, 12000, 0, NULL) == CUDA_SUCCESS && p == dlsym(h, "cuInit")); /* NULL status is fine */
}

/* The state machine: not initialised, no context, NULL arguments, then a working allocation. */
static void driver(void *h) {
    char prof[600], state[300];
    const char *dir = getenv("FAKEGPU_TEST_PROFILES");
    snprintf(prof, sizeof prof, "%s/a16-16q.profile", dir ? dir : "profiles");
    snprintf(state, sizeof state, "%s/driver", fg_test_dir());
    setenv("FAKEGPU_PROFILE", prof, 1);
    setenv("FAKEGPU_STATE_DIR", state, 1);
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
    CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))dlsym(h, "cuMemAlloc_v2");
    CUresult (*freep)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))dlsym(h, "cuMemFree_v2");
    CUresult (*retain)(CUcontext *, CUdevice) = (CUresult(*)(CUcontext *, CUdevice))dlsym(h, "cuDevicePrimaryCtxRetain");
    CUresult (*setcur)(CUcontext) = (CUresult(*)(CUcontext))dlsym(h, "cuCtxSetCurrent");
    CUresult (*meminfo)(size_t *, size_t *) = (CUresult(*)(size_t *, size_t *))dlsym(h, "cuMemGetInfo_v2");
    CUresult (*errname)(CUresult, const char **) = (CUresult(*)(CUresult, const char **))dlsym(h, "cuGetErrorName");
    CUresult (*stub)(void) = (CUresult(*)(void))dlsym(h, "cuProfilerStart");
    CUdeviceptr d = 0;
    CUcontext ctx = NULL;
    size_t fr = 0, tot = 0;
    const char *s = NULL;
    CHECK(alloc(&d, 1) == CUDA_ERROR_NOT_INITIALIZED);
    CHECK(init(1) == CUDA_ERROR_INVALID_VALUE);
    CHECK(init(0) == CUDA_SUCCESS);
    CHECK(alloc(&d, 1) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(retain(NULL, 0) == CUDA_ERROR_INVALID_VALUE);
    CHECK(retain(&ctx, 7) == CUDA_ERROR_INVALID_DEVICE);
    CHECK(retain(&ctx, 0) == CUDA_SUCCESS && setcur(ctx) == CUDA_SUCCESS);
    CHECK(alloc(NULL, 1) == CUDA_ERROR_INVALID_VALUE && alloc(&d, 0) == CUDA_ERROR_INVALID_VALUE);
    CHECK(meminfo(NULL, &tot) == CUDA_ERROR_INVALID_VALUE);
    CHECK(alloc(&d, 1000) == CUDA_SUCCESS && d != 0 && d % (2 << 20) == 0);
    CHECK(meminfo(&fr, &tot) == CUDA_SUCCESS && tot == 16384ULL << 20 && fr == tot - (302ULL << 20));
    CHECK(freep(d + 8) == CUDA_ERROR_INVALID_VALUE && freep(d) == CUDA_SUCCESS && freep(d) == CUDA_ERROR_INVALID_VALUE);
    CHECK(alloc(&d, 17ULL << 30) == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(errname(CUDA_ERROR_OUT_OF_MEMORY, &s) == CUDA_SUCCESS && strcmp(s, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
    CHECK(errname((CUresult)12345, &s) == CUDA_ERROR_INVALID_VALUE && s == NULL);
    CHECK(stub() == CUDA_ERROR_NOT_SUPPORTED);
}

void test_procaddr(void) {
    void *h = lib("libcuda.so.1");
    if (!h)
        return;
    gpa_t gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
    CHECK(gpa != NULL);
    if (gpa) {
        table(h, gpa);
        rules(h, gpa);
        driver(h);
    }
    void *n = lib("libnvidia-ml.so.1");
    for (unsigned i = 0; n && i < fg_nvml_nfunctions; i++)
        CHECK_MSG(dlsym(n, fg_nvml_functions[i]) != NULL, "%s not exported", fg_nvml_functions[i]);
}
