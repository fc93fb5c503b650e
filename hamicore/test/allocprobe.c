/*
 * allocprobe: allocate device memory through one of the three ways programs reach the driver and
 * report one JSON line. Used by the Go integration tests and the benchmark where a flag of
 * fakegpu's cudaprobe does not exist (threads racing, fork, per-thread-stream variants, loops).
 *
 *   --api symbols|dlsym|procaddress   --alloc mem|managed|pitch|async|vmm|array   --ptsz
 *   --mib N --chunk-mib C --device D --threads T --hold SECONDS
 *   --fork-mib M     after allocating, fork; the child allocates M MiB and reports its own line
 *   --loop N         N x (alloc 1 MiB + free), then N x launch (benchmarks), no JSON
 *   --then-device D --then-mib M   afterwards, in the same thread, make device D's primary context
 *                    current and allocate M MiB there; one more JSON line (role "then")
 *   --init-us        print how many microseconds the first driver call (cuInit) took: with
 *                    libvgpu.so that call runs its whole initialization (benchmarks)
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "limitbed/cuda_abi.h"

#define MIB (1ULL << 20)
__typeof__(cuMemAllocAsync) cuMemAllocAsync_ptsz;
__typeof__(cuMemFreeAsync) cuMemFreeAsync_ptsz;

static struct {
    __typeof__(&cuInit) init;
    __typeof__(&cuDeviceGet) device_get;
    __typeof__(&cuDevicePrimaryCtxRetain) retain;
    __typeof__(&cuCtxSetCurrent) set_current;
    __typeof__(&cuMemAlloc_v2) alloc;
    __typeof__(&cuMemFree_v2) free;
    __typeof__(&cuMemAllocManaged) managed;
    __typeof__(&cuMemAllocPitch_v2) pitch;
    __typeof__(&cuMemAllocAsync) async;
    __typeof__(&cuMemFreeAsync) free_async;
    __typeof__(&cuMemCreate) create;
    __typeof__(&cuMemRelease) release;
    __typeof__(&cuArrayCreate_v2) array;
    __typeof__(&cuArrayDestroy) array_destroy;
    __typeof__(&cuMemGetInfo_v2) info;
    __typeof__(&cuLaunchKernel) launch;
} f;

static const char *api = "symbols", *kind = "mem";
static int ptsz, device, threads = 1;
static unsigned long mib = 0, chunk = 0, fork_mib = 0, loop = 0, then_mib = 0;
static int then_device = -1;
static double hold;
static int bench, init_us;

static void load(void)
{
    if (!strcmp(api, "symbols")) {
        f.init = cuInit, f.device_get = cuDeviceGet, f.retain = cuDevicePrimaryCtxRetain, f.set_current = cuCtxSetCurrent;
        f.alloc = cuMemAlloc_v2, f.free = cuMemFree_v2, f.managed = cuMemAllocManaged, f.pitch = cuMemAllocPitch_v2;
        f.async = cuMemAllocAsync, f.free_async = cuMemFreeAsync, f.create = cuMemCreate, f.release = cuMemRelease;
        f.array = cuArrayCreate_v2, f.array_destroy = cuArrayDestroy, f.info = cuMemGetInfo_v2, f.launch = cuLaunchKernel;
        return;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("{\"error\":\"dlopen: %s\"}\n", dlerror());
        exit(2);
    }
    if (!strcmp(api, "dlsym")) {
#define D(field, sym) *(void **)&f.field = dlsym(h, sym)
        D(init, "cuInit"), D(device_get, "cuDeviceGet"), D(retain, "cuDevicePrimaryCtxRetain");
        D(set_current, "cuCtxSetCurrent"), D(alloc, "cuMemAlloc_v2"), D(free, "cuMemFree_v2");
        D(managed, "cuMemAllocManaged"), D(pitch, "cuMemAllocPitch_v2"), D(create, "cuMemCreate");
        D(release, "cuMemRelease"), D(array, "cuArrayCreate_v2"), D(array_destroy, "cuArrayDestroy");
        D(info, "cuMemGetInfo_v2"), D(launch, "cuLaunchKernel");
        D(async, ptsz ? "cuMemAllocAsync_ptsz" : "cuMemAllocAsync");
        D(free_async, ptsz ? "cuMemFreeAsync_ptsz" : "cuMemFreeAsync");
        return;
    }
    /* What a CUDA >= 12 runtime does: one dlsym, everything else by name and version. */
    __typeof__(&cuGetProcAddress_v2) gpa = (__typeof__(gpa))dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        printf("{\"error\":\"no cuGetProcAddress_v2\"}\n");
        exit(2);
    }
    cuuint64_t fl = ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    CUdriverProcAddressQueryResult q;
#define P(field, name, ver) gpa(name, (void **)&f.field, ver, fl, &q)
    P(init, "cuInit", 12000), P(device_get, "cuDeviceGet", 12000), P(retain, "cuDevicePrimaryCtxRetain", 12000);
    P(set_current, "cuCtxSetCurrent", 12000), P(alloc, "cuMemAlloc", 12000), P(free, "cuMemFree", 12000);
    P(managed, "cuMemAllocManaged", 12000), P(pitch, "cuMemAllocPitch", 12000), P(async, "cuMemAllocAsync", 12000);
    P(free_async, "cuMemFreeAsync", 12000), P(create, "cuMemCreate", 12000), P(release, "cuMemRelease", 12000);
    P(array, "cuArrayCreate", 12000), P(array_destroy, "cuArrayDestroy", 12000), P(info, "cuMemGetInfo", 12000);
    P(launch, "cuLaunchKernel", 7000);
}

static const char *errname(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
    default: {
        static char buf[32];
        snprintf(buf, sizeof buf, "CUDA_ERROR_%d", (int)r);
        return buf;
    }
    }
}

struct alloc_rec {
    uint64_t v;
};
#define MAXREC 65536
static struct alloc_rec recs[MAXREC];
static _Atomic unsigned nrec;
static _Atomic unsigned long granted_mib, remaining_mib;
static _Atomic int first_err;
static CUcontext ctx;

static CUresult alloc_one(size_t bytes, uint64_t *out)
{
    CUdeviceptr p = 0;
    CUresult r;
    if (!strcmp(kind, "mem"))
        r = f.alloc(&p, bytes);
    else if (!strcmp(kind, "managed"))
        r = f.managed(&p, bytes, CU_MEM_ATTACH_GLOBAL);
    else if (!strcmp(kind, "pitch")) {
        size_t pitch;
        r = f.pitch(&p, &pitch, MIB, bytes / MIB, 4);
    } else if (!strcmp(kind, "async"))
        r = f.async(&p, bytes, NULL);
    else if (!strcmp(kind, "vmm")) {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = device;
        CUmemGenericAllocationHandle hd = 0;
        r = f.create(&hd, bytes, &prop, 0);
        p = hd;
    } else if (!strcmp(kind, "array")) {
        CUDA_ARRAY_DESCRIPTOR d = {.Width = 65536, .Height = bytes / (65536 * 4), .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
        CUarray a = NULL;
        r = f.array(&a, &d);
        p = (uint64_t)(uintptr_t)a;
    } else {
        fprintf(stderr, "unknown --alloc %s\n", kind);
        exit(2);
    }
    *out = p;
    return r;
}

static void free_one(uint64_t v)
{
    if (!strcmp(kind, "vmm"))
        f.release(v);
    else if (!strcmp(kind, "array"))
        f.array_destroy((CUarray)(uintptr_t)v);
    else if (!strcmp(kind, "async"))
        f.free_async(v, NULL);
    else
        f.free(v);
}

static void *worker(void *arg)
{
    (void)arg;
    f.set_current(ctx);
    for (;;) {
        unsigned long rem = atomic_load(&remaining_mib);
        unsigned long take;
        do {
            if (rem == 0)
                return NULL;
            take = rem < chunk ? rem : chunk;
        } while (!atomic_compare_exchange_weak(&remaining_mib, &rem, rem - take));
        uint64_t v;
        CUresult r = alloc_one(take * MIB, &v);
        if (r != CUDA_SUCCESS) {
            int z = 0;
            atomic_compare_exchange_strong(&first_err, &z, (int)r);
            if (threads == 1)
                return NULL;
            continue;
        }
        atomic_fetch_add(&granted_mib, take);
        unsigned i = atomic_fetch_add(&nrec, 1);
        if (i < MAXREC)
            recs[i].v = v;
    }
}

static void report(const char *role)
{
    size_t fr = 0, tot = 0;
    CUresult ir = f.info(&fr, &tot);
    int e = atomic_load(&first_err);
    printf("{\"role\":\"%s\",\"api\":\"%s\",\"alloc\":\"%s\",\"pid\":%d,\"requested_mib\":%lu,\"granted_mib\":%lu,"
           "\"error\":\"%s\",\"total_mib\":%llu,\"free_mib\":%llu,\"info_error\":\"%s\",\"threads\":%d}\n",
           role, api, kind, (int)getpid(), mib, atomic_load(&granted_mib), e ? errname((CUresult)e) : "",
           (unsigned long long)tot / MIB, (unsigned long long)fr / MIB, errname(ir), threads);
    fflush(stdout);
}

static void run(unsigned long want)
{
    atomic_store(&remaining_mib, want);
    atomic_store(&granted_mib, 0);
    atomic_store(&first_err, 0);
    pthread_t t[64];
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
}

/* The benchmark's launches, a function of their own so that callgrind can count only them
 * (--toggle-collect=launches). fn NULL: the driver refuses each launch (nothing is queued); a
 * non-NULL handle (BENCH_LAUNCH_FN=1) is a kernel of FAKEGPU_LAUNCH_NS on fakegpu. */
static char dummy_fn;
static void __attribute__((noinline)) launches(unsigned long n, CUfunction fn)
{
    for (unsigned long i = 0; i < n; i++)
        f.launch(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
}

/* The flags into the globals above; 0, or 2 after naming an unknown one. */
static int parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strncmp(a, "--api=", 6)) api = a + 6;
        else if (!strcmp(a, "--api")) api = v, i++;
        else if (!strncmp(a, "--alloc=", 8)) kind = a + 8;
        else if (!strcmp(a, "--alloc")) kind = v, i++;
        else if (!strcmp(a, "--ptsz")) ptsz = 1;
        else if (!strcmp(a, "--mib")) mib = strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "--chunk-mib")) chunk = strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "--device")) device = atoi(v), i++;
        else if (!strcmp(a, "--threads")) threads = atoi(v), i++;
        else if (!strcmp(a, "--hold")) hold = atof(v), i++;
        else if (!strcmp(a, "--fork-mib")) fork_mib = strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "--loop")) loop = strtoul(v, NULL, 10), bench = 1, i++;
        else if (!strcmp(a, "--init-us")) init_us = 1;
        else if (!strcmp(a, "--then-device")) then_device = atoi(v), i++;
        else if (!strcmp(a, "--then-mib")) then_mib = strtoul(v, NULL, 10), i++;
        else { fprintf(stderr, "unknown flag %s\n", a); return 2; }
    }
    return 0;
}

/* --then-device: the library caches the current device per thread: switching must be seen.
 * 0, or 1 after the error line. */
static int then_other_device(void)
{
    CUdevice td;
    CUcontext tc;
    if (f.device_get(&td, then_device) || f.retain(&tc, td) || f.set_current(tc)) {
        printf("{\"role\":\"then\",\"error\":\"context of device %d\"}\n", then_device);
        return 1;
    }
    atomic_store(&remaining_mib, then_mib);
    atomic_store(&granted_mib, 0);
    atomic_store(&first_err, 0);
    mib = chunk = then_mib;
    ctx = tc;
    worker(NULL);
    report("then");
    return 0;
}

/* --fork-mib: a forked child allocates on its own; the parent waits for it. */
static void forked_child(void)
{
    fflush(NULL);
    pid_t c = fork();
    if (c == 0) {
        /* A forked child is a new process for the driver: it needs its own context. */
        CUdevice cd;
        if (f.device_get(&cd, device) || f.retain(&ctx, cd) || f.set_current(ctx)) {
            printf("{\"role\":\"child\",\"error\":\"child context\"}\n");
            _exit(1);
        }
        nrec = 0;
        mib = fork_mib;
        chunk = fork_mib;
        threads = 1;
        run(fork_mib);
        report("child");
        if (hold > 0)
            usleep((useconds_t)(hold * 1e6));
        _exit(0);
    }
    waitpid(c, NULL, 0);
}

int main(int argc, char **argv)
{
    if (parse(argc, argv) != 0)
        return 2;
    if (threads < 1 || threads > 64)
        threads = 1;
    if (!chunk)
        chunk = mib ? mib : 1;
    load();
    CUdevice d;
    CUresult r;
    if (init_us) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        r = f.init(0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("%ld\n", (long)((t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000));
        return r != CUDA_SUCCESS;
    }
    if ((r = f.init(0)) || (r = f.device_get(&d, device)) || (r = f.retain(&ctx, d)) || (r = f.set_current(ctx))) {
        printf("{\"error\":\"init: %s (%d)\"}\n", errname(r), (int)r);
        return 1;
    }
    if (bench) {
        /* Benchmark body: alloc/free pairs, then launches (a NULL function is fine on fakegpu). */
        int launch_only = getenv("BENCH_LAUNCH_ONLY") != NULL;
        for (unsigned long i = 0; i < loop && !launch_only; i++) {
            CUdeviceptr p;
            if (f.alloc(&p, MIB) == CUDA_SUCCESS)
                f.free(p);
        }
        launches(loop, getenv("BENCH_LAUNCH_FN") ? (CUfunction)(void *)&dummy_fn : NULL);
        return 0;
    }
    run(mib);
    report("main");
    if (then_device >= 0 && then_other_device() != 0)
        return 1;
    if (fork_mib)
        forked_child();
    if (hold > 0)
        usleep((useconds_t)(hold * 1e6));
    unsigned n = atomic_load(&nrec);
    for (unsigned i = 0; i < n && i < MAXREC; i++)
        free_one(recs[i].v);
    return 0;
}
