/*
 * Events (src/cuda_event.c): a marker in this process's work queue on a GPU, complete once the
 * kernels queued before it have run; and the per-thread capture mode exchange.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <limitbed/cuda_abi.h>

#include "check.h"

#define SYM(h, t, n) ((t)dlsym(h, n))

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void test_event(void) {
    char p[600], prof[600], state[300];
    const char *dir = getenv("FAKEGPU_TEST_LIB"), *pd = getenv("FAKEGPU_TEST_PROFILES");
    snprintf(p, sizeof p, "%s/libcuda.so.1", dir ? dir : ".");
    void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    CHECK_MSG(h != NULL, "dlopen %s: %s", p, dlerror());
    if (!h)
        return;
    snprintf(prof, sizeof prof, "%s/a16-16q.profile", pd ? pd : "profiles");
    snprintf(state, sizeof state, "%s/event", fg_test_dir());
    setenv("FAKEGPU_PROFILE", prof, 1);
    setenv("FAKEGPU_STATE_DIR", state, 1);
    CUresult (*init)(unsigned) = SYM(h, CUresult(*)(unsigned), "cuInit");
    CUresult (*retain)(CUcontext *, CUdevice) = SYM(h, CUresult(*)(CUcontext *, CUdevice), "cuDevicePrimaryCtxRetain");
    CUresult (*setcur)(CUcontext) = SYM(h, CUresult(*)(CUcontext), "cuCtxSetCurrent");
    CUresult (*create)(CUevent *, unsigned) = SYM(h, CUresult(*)(CUevent *, unsigned), "cuEventCreate");
    CUresult (*record)(CUevent, CUstream) = SYM(h, CUresult(*)(CUevent, CUstream), "cuEventRecord");
    CUresult (*query)(CUevent) = SYM(h, CUresult(*)(CUevent), "cuEventQuery");
    CUresult (*esync)(CUevent) = SYM(h, CUresult(*)(CUevent), "cuEventSynchronize");
    CUresult (*destroy)(CUevent) = SYM(h, CUresult(*)(CUevent), "cuEventDestroy_v2");
    CUresult (*destroy1)(CUevent) = SYM(h, CUresult(*)(CUevent), "cuEventDestroy");
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) =
        SYM(h, CUresult(*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                           void **, void **),
            "cuLaunchKernel");
    CUresult (*load)(CUmodule *, const void *) = SYM(h, CUresult(*)(CUmodule *, const void *), "cuModuleLoadData");
    CUresult (*getfn)(CUfunction *, CUmodule, const char *) =
        SYM(h, CUresult(*)(CUfunction *, CUmodule, const char *), "cuModuleGetFunction");
    CUresult (*screate)(CUstream *, unsigned) = SYM(h, CUresult(*)(CUstream *, unsigned), "cuStreamCreate");
    CUresult (*begin)(CUstream, CUstreamCaptureMode) = SYM(h, CUresult(*)(CUstream, CUstreamCaptureMode), "cuStreamBeginCapture_v2");
    CUresult (*end)(CUstream, CUgraph *) = SYM(h, CUresult(*)(CUstream, CUgraph *), "cuStreamEndCapture");
    CUresult (*xmode)(CUstreamCaptureMode *) = SYM(h, CUresult(*)(CUstreamCaptureMode *), "cuThreadExchangeStreamCaptureMode");
    CUcontext ctx;
    CUmodule m;
    CUfunction spin;
    CUevent e, e2;
    CHECK(init(0) == CUDA_SUCCESS && retain(&ctx, 0) == CUDA_SUCCESS && setcur(ctx) == CUDA_SUCCESS);
    CHECK(load(&m, "x") == CUDA_SUCCESS && getfn(&spin, m, "fakegpu_spin") == CUDA_SUCCESS);
    CHECK(create(NULL, 0) == CUDA_ERROR_INVALID_VALUE && create(&e, 0x80) == CUDA_ERROR_INVALID_VALUE);
    CHECK(create(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS && create(&e2, 0) == CUDA_SUCCESS);
    CHECK(query(e) == CUDA_SUCCESS); /* never recorded: complete */
    unsigned long long ns = 100000000ULL, longer = 1000000000ULL; /* 100 ms, 1 s: robust to a loaded machine */
    void *params[] = {&ns}, *lparams[] = {&longer};
    for (int i = 0; i < 3; i++)
        CHECK(launch(spin, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) == CUDA_SUCCESS);
    CHECK(record(e, NULL) == CUDA_SUCCESS);
    CHECK(launch(spin, 1, 1, 1, 1, 1, 1, 0, NULL, lparams, NULL) == CUDA_SUCCESS);
    CHECK(record(e2, NULL) == CUDA_SUCCESS);
    CHECK(query(e) == CUDA_ERROR_NOT_READY && query(e2) == CUDA_ERROR_NOT_READY);
    sleep_ms(600); /* the three kernels before e have run, the fourth has not */
    CHECK_MSG(query(e) == CUDA_SUCCESS, "e after its kernels: %d", (int)query(e));
    CHECK_MSG(query(e2) == CUDA_ERROR_NOT_READY, "e2 before its kernel: %d", (int)query(e2));
    CHECK(esync(e2) == CUDA_SUCCESS && query(e2) == CUDA_SUCCESS);
    /* A capturing stream: no event nodes in fakegpu's graphs. */
    CUstream s;
    CUgraph g;
    CHECK(screate(&s, 0) == CUDA_SUCCESS && begin(s, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
    CHECK(record(e, s) == CUDA_ERROR_NOT_SUPPORTED);
    CHECK(end(s, &g) == CUDA_SUCCESS);
    CHECK(record(e, (CUstream)(uintptr_t)0xdead) == CUDA_ERROR_INVALID_HANDLE);
    CHECK(destroy(e) == CUDA_SUCCESS && destroy(e) == CUDA_ERROR_INVALID_HANDLE && query(e) == CUDA_ERROR_INVALID_HANDLE);
    CHECK(destroy1(e2) == CUDA_SUCCESS);
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CHECK(xmode(&mode) == CUDA_SUCCESS && mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
    CHECK(xmode(&mode) == CUDA_SUCCESS && mode == CU_STREAM_CAPTURE_MODE_RELAXED);
    mode = (CUstreamCaptureMode)7;
    CHECK(xmode(&mode) == CUDA_ERROR_INVALID_VALUE && xmode(NULL) == CUDA_ERROR_INVALID_VALUE);
}
