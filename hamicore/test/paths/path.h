/*
 * Shared helpers of the path programs: one program per allocation path (VMM, contexts, pools,
 * graphs, arrays, device order, threads, fork). Each runs against any libcuda.so.1 — fakegpu or
 * the real driver — natively or under libvgpu.so, and checks what that driver must answer:
 *   PATH_EXPECT=native    no library: what the real driver does (documented per program)
 *   PATH_EXPECT=limited   under libvgpu.so with CUDA_DEVICE_MEMORY_LIMIT_0 = PATH_LIMIT_MIB
 *                         (default 3000): refused at the limit, usage back to exactly 0
 * One line per check ("ok ..." / "FAIL ..."), then "PASS <name>" or "FAIL <name>"; exit 0 / 1
 * (77: the machine cannot run it, e.g. one GPU for the device-order program).
 */
#ifndef PATH_H
#define PATH_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limitbed/cuda_abi.h"

#define MIB (1024ULL * 1024ULL)

static int path_failed;
static int path_limited;
static unsigned long long path_limit_mib = 3000;

#define EXPECT(cond, ...)                                                                                          \
    do {                                                                                                           \
        int ok_ = !!(cond);                                                                                        \
        printf("%s ", ok_ ? "ok  " : "FAIL");                                                                      \
        printf(__VA_ARGS__);                                                                                       \
        printf("\n");                                                                                              \
        if (!ok_)                                                                                                  \
            path_failed = 1;                                                                                       \
    } while (0)

#define CU(call) EXPECT((call) == CUDA_SUCCESS, "%s", #call)

static inline void path_begin(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *e = getenv("PATH_EXPECT");
    if (!e || (strcmp(e, "native") != 0 && strcmp(e, "limited") != 0)) {
        fprintf(stderr, "set PATH_EXPECT=native (no libvgpu.so) or PATH_EXPECT=limited (under libvgpu.so)\n");
        exit(2);
    }
    path_limited = strcmp(e, "limited") == 0;
    const char *l = getenv("PATH_LIMIT_MIB");
    if (l)
        path_limit_mib = strtoull(l, NULL, 10);
}

static inline int path_end(const char *name)
{
    printf("%s %s (%s)\n", path_failed ? "FAIL" : "PASS", name, path_limited ? "limited" : "native");
    return path_failed;
}

/* cuInit and the primary context of device 0, current on this thread. */
static inline CUcontext path_ctx(void)
{
    CUcontext c = NULL;
    CUdevice d;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&d, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS) {
        printf("FAIL no CUDA device\n");
        exit(1);
    }
    return c;
}

static inline unsigned long long free_mib(void)
{
    size_t f = 0, t = 0;
    if (cuMemGetInfo(&f, &t) != CUDA_SUCCESS)
        return 0;
    return f / MIB;
}

/* |a - b| <= tol */
static inline int near(unsigned long long a, unsigned long long b, unsigned long long tol)
{
    return a > b ? a - b <= tol : b - a <= tol;
}

/* Native numbers of a real GPU move by the driver's own reservations (page tables, pool
 * granularity): native checks allow this much. Under the library the numbers are its own. */
#define NATIVE_TOL 96

/* Usage back to 0: under the library free == the limit exactly; natively, what it was. */
static inline void expect_all_released(unsigned long long start_free)
{
    unsigned long long f = free_mib();
    if (path_limited)
        EXPECT(f == path_limit_mib, "all released: free %llu MiB == limit %llu MiB", f, path_limit_mib);
    else
        EXPECT(near(f, start_free, NATIVE_TOL), "all released: free %llu MiB ~ %llu MiB at start", f, start_free);
}

/* A kernel the real driver can load (PTX, JIT-compiled); fakegpu accepts any image. */
static const char path_ptx[] = ".version 6.0\n.target sm_50\n.address_size 64\n"
                               ".visible .entry noop()\n{\n\tret;\n}\n";

static inline CUfunction path_kernel(void)
{
    CUmodule m;
    CUfunction f = NULL;
    if (cuModuleLoadData(&m, path_ptx) != CUDA_SUCCESS || cuModuleGetFunction(&f, m, "noop") != CUDA_SUCCESS)
        printf("FAIL cannot load the noop kernel\n"), exit(1);
    return f;
}

#endif
