/*
 * cudaprobe: the workload of every limitbed scenario. Initialises the CUDA driver, allocates
 * --mib MiB on --device in --chunk-mib pieces with the chosen allocation call, optionally
 * launches kernels, reports one JSON line, then holds the memory (--hold / --hold-until-signal).
 *
 * --api chooses how the driver is reached, because a limiter must catch all three:
 *   symbols      the linked entry points (what code compiled against cuda.h calls)
 *   dlsym        dlopen("libcuda.so.1") + dlsym of the versioned names (pre-11.3 runtimes)
 *   procaddress  dlsym of cuGetProcAddress only, everything else through it (CUDA >= 11.3 runtimes)
 * and two ways a process escapes an interposer on purpose (docs/attacks.md), for the node's
 * driver-truth accounting to catch:
 *   dlvsym       glibc's own dlsym, fetched with dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34"),
 *                so an interposed dlsym never sees the lookups
 *   dlmopen      libc and the driver loaded into a new link namespace (dlmopen(LM_ID_NEWLM)),
 *                where no preload applies, and the names looked up with that namespace's dlsym
 * Built only against limitbed's abi headers, so the same source links against the real driver.
 *
 * Exit status: 0 when the probe ran (a refused allocation is a result, in the JSON), 1 when the
 * driver or the device could not be initialised, 2 on a usage error.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <limitbed/cuda_abi.h>

#define MIB (1024ULL * 1024ULL)

/* field, name for cuGetProcAddress, versioned name for dlsym, version asked for, linked symbol.
 * The linked symbol goes through cuda_abi.h's macros (cuMemAlloc -> cuMemAlloc_v2) like cuda.h. */
#define PROBE_FUNCS(X)                                                                                                 \
    X(Init, "cuInit", "cuInit", cuInit)                                                                                \
    X(DriverGetVersion, "cuDriverGetVersion", "cuDriverGetVersion", cuDriverGetVersion)                                \
    X(GetErrorName, "cuGetErrorName", "cuGetErrorName", cuGetErrorName)                                                \
    X(DeviceGet, "cuDeviceGet", "cuDeviceGet", cuDeviceGet)                                                            \
    X(DeviceGetName, "cuDeviceGetName", "cuDeviceGetName", cuDeviceGetName)                                            \
    X(DeviceGetUuid, "cuDeviceGetUuid", "cuDeviceGetUuid", cuDeviceGetUuid)                                            \
    X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain)        \
    X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", cuDevicePrimaryCtxRelease) \
    X(CtxSetCurrent, "cuCtxSetCurrent", "cuCtxSetCurrent", cuCtxSetCurrent)                                            \
    X(CtxSynchronize, "cuCtxSynchronize", "cuCtxSynchronize", cuCtxSynchronize)                                        \
    X(MemGetInfo, "cuMemGetInfo", "cuMemGetInfo_v2", cuMemGetInfo)                                                     \
    X(MemAlloc, "cuMemAlloc", "cuMemAlloc_v2", cuMemAlloc)                                                             \
    X(MemFree, "cuMemFree", "cuMemFree_v2", cuMemFree)                                                                 \
    X(MemAllocManaged, "cuMemAllocManaged", "cuMemAllocManaged", cuMemAllocManaged)                                    \
    X(MemAllocPitch, "cuMemAllocPitch", "cuMemAllocPitch_v2", cuMemAllocPitch)                                         \
    X(MemAllocAsync, "cuMemAllocAsync", "cuMemAllocAsync", cuMemAllocAsync)                                            \
    X(MemFreeAsync, "cuMemFreeAsync", "cuMemFreeAsync", cuMemFreeAsync)                                                \
    X(MemCreate, "cuMemCreate", "cuMemCreate", cuMemCreate)                                                            \
    X(MemRelease, "cuMemRelease", "cuMemRelease", cuMemRelease)                                                        \
    X(ArrayCreate, "cuArrayCreate", "cuArrayCreate_v2", cuArrayCreate)                                                 \
    X(ArrayDestroy, "cuArrayDestroy", "cuArrayDestroy", cuArrayDestroy)                                                \
    X(ModuleLoadData, "cuModuleLoadData", "cuModuleLoadData", cuModuleLoadData)                                        \
    X(ModuleGetFunction, "cuModuleGetFunction", "cuModuleGetFunction", cuModuleGetFunction)                            \
    X(LaunchKernel, "cuLaunchKernel", "cuLaunchKernel", cuLaunchKernel)

static struct api {
#define FIELD(f, pname, dname, sym) __typeof__(&sym) f;
    PROBE_FUNCS(FIELD)
#undef FIELD
} api;

enum alloc_kind { A_MEM, A_MANAGED, A_PITCH, A_ASYNC, A_VMM, A_ARRAY };
static const char *const alloc_names[] = {"mem", "managed", "pitch", "async", "vmm", "array"};

static struct opts {
    const char *api;
    int device, threads, kind, hold_signal, ptds, cuda_version, spread, leader_exits;
    unsigned long long mib, chunk_mib, launches, blocks;
    double hold;
} o = {.api = "symbols", .threads = 1, .cuda_version = 12000, .blocks = 1};

static const char *err_name(CUresult r, char *buf, size_t len) {
    const char *s = NULL;
    if (api.GetErrorName && api.GetErrorName(r, &s) == CUDA_SUCCESS && s)
        return s;
    snprintf(buf, len, "CUDA_ERROR_%d", (int)r);
    return buf;
}

static int usage(const char *msg) {
    fprintf(stderr,
            "cudaprobe: %s\nusage: cudaprobe [--device N] [--mib N] [--chunk-mib C] [--alloc=mem|managed|pitch|async|vmm|array]\n"
            "                 [--api=symbols|dlsym|procaddress|dlvsym|dlmopen] [--cuda-version V] [--ptds] [--threads T]\n"
            "                 [--launch N] [--blocks B] [--spread N] [--hold SECONDS | --hold-until-signal] [--leader-exits]\n",
            msg);
    return 2;
}

static int number(const char *s, unsigned long long *out) {
    char *end;
    errno = 0;
    if (!s || *s < '0' || *s > '9')
        return -1;
    *out = strtoull(s, &end, 10);
    return errno || *end ? -1 : 0;
}

static int parse(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        char *a = argv[i], *v = strchr(a, '=');
        char name[64];
        snprintf(name, sizeof name, "%.*s", v ? (int)(v - a) : (int)strlen(a), a);
        if (v)
            v++;
        else if (strcmp(name, "--hold-until-signal") && strcmp(name, "--ptds") && strcmp(name, "--leader-exits") && i + 1 < argc)
            v = argv[++i];
        unsigned long long n = 0;
        int numeric = v && number(v, &n) == 0;
        if (!strcmp(name, "--api") && v) {
            if (strcmp(v, "symbols") && strcmp(v, "dlsym") && strcmp(v, "procaddress") && strcmp(v, "dlvsym") &&
                strcmp(v, "dlmopen"))
                return usage("--api must be symbols, dlsym, procaddress, dlvsym or dlmopen");
            o.api = v;
        } else if (!strcmp(name, "--alloc") && v) {
            o.kind = -1;
            for (int k = 0; k < 6; k++)
                if (!strcmp(v, alloc_names[k]))
                    o.kind = k;
            if (o.kind < 0)
                return usage("--alloc must be mem, managed, pitch, async, vmm or array");
        } else if (!strcmp(name, "--hold-until-signal")) {
            o.hold_signal = 1;
        } else if (!strcmp(name, "--ptds")) {
            o.ptds = 1;
        } else if (!strcmp(name, "--leader-exits")) {
            o.leader_exits = 1;
        } else if (!strcmp(name, "--hold") && v) {
            char *end;
            o.hold = strtod(v, &end);
            if (*end || o.hold < 0)
                return usage("--hold wants seconds");
        } else if (!numeric) {
            return usage(v ? "unknown option or bad number" : "unknown option or missing value");
        } else if (!strcmp(name, "--device")) {
            o.device = (int)n;
        } else if (!strcmp(name, "--mib")) {
            o.mib = n;
        } else if (!strcmp(name, "--chunk-mib")) {
            o.chunk_mib = n;
        } else if (!strcmp(name, "--threads") && n >= 1 && n <= 64) {
            o.threads = (int)n;
        } else if (!strcmp(name, "--launch")) {
            o.launches = n;
        } else if (!strcmp(name, "--blocks") && n >= 1) {
            o.blocks = n;
        } else if (!strcmp(name, "--spread") && n >= 1 && n <= 64) {
            o.spread = (int)n;
        } else if (!strcmp(name, "--cuda-version")) {
            o.cuda_version = (int)n;
        } else {
            return usage("unknown option");
        }
    }
    if (!o.chunk_mib)
        o.chunk_mib = o.mib ? o.mib : 1;
    return 0;
}

typedef void *(*dlsym_fn)(void *, const char *);

/* The bypasses: a dlsym no interposer sees, and the driver handle it looks names up in. */
static const char *escape(void **h, dlsym_fn *look) {
    if (!strcmp(o.api, "dlvsym")) {
        *look = (dlsym_fn)dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
        if (!*look)
            *look = (dlsym_fn)dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
        if (!*look)
            return "dlvsym(dlsym) failed";
        *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        return *h ? NULL : dlerror();
    }
    void *lc = dlmopen(LM_ID_NEWLM, "libc.so.6", RTLD_NOW | RTLD_LOCAL);
    Lmid_t ns;
    if (!lc || dlinfo(lc, RTLD_DI_LMID, &ns) != 0)
        return dlerror();
    *h = dlmopen(ns, "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!*h)
        return dlerror();
    *look = (dlsym_fn)dlsym(lc, "dlsym"); /* the new namespace's own dlsym */
    return *look ? NULL : "dlsym(dlsym) in the new namespace failed";
}

/* Fills api by the chosen route; returns a message on failure. */
static const char *load_api(void) {
    if (!strcmp(o.api, "symbols")) {
#define LINK(f, pname, dname, sym) api.f = &sym;
        PROBE_FUNCS(LINK)
#undef LINK
        return NULL;
    }
    if (!strcmp(o.api, "dlvsym") || !strcmp(o.api, "dlmopen")) {
        void *h = NULL;
        dlsym_fn look = NULL;
        const char *err = escape(&h, &look);
        if (err)
            return err;
#define ESCAPE(f, pname, dname, sym) api.f = (__typeof__(api.f))look(h, dname);
        PROBE_FUNCS(ESCAPE)
#undef ESCAPE
        return api.Init ? NULL : "cuInit not found";
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return dlerror();
    if (!strcmp(o.api, "dlsym")) {
#define DLSYM(f, pname, dname, sym) api.f = (__typeof__(api.f))dlsym(h, dname);
        PROBE_FUNCS(DLSYM)
#undef DLSYM
        return api.Init ? NULL : "dlsym(cuInit) failed";
    }
    __typeof__(&cuGetProcAddress_v2) gpa = (__typeof__(gpa))dlsym(h, "cuGetProcAddress_v2");
    if (!gpa)
        return "dlsym(cuGetProcAddress_v2) failed";
    cuuint64_t flags = o.ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
#define PROC(f, pname, dname, sym)                                                                                     \
    {                                                                                                                  \
        void *p = NULL;                                                                                                \
        CUdriverProcAddressQueryResult st;                                                                             \
        if (gpa(pname, &p, o.cuda_version, flags, &st) != CUDA_SUCCESS)                                                \
            p = NULL;                                                                                                  \
        api.f = (__typeof__(api.f))p;                                                                                  \
    }
    PROBE_FUNCS(PROC)
#undef PROC
    return api.Init ? NULL : "cuGetProcAddress(cuInit) failed";
}

static CUcontext ctx;
static CUdevice dev;
static struct chunk {
    CUdeviceptr p;
    unsigned long long mib;
} *chunks;
static unsigned long long nchunks;
static unsigned long long next_chunk;
static unsigned long long granted;
static int first_error; /* CUresult of the first refusal */
static int stop;

static CUresult alloc_one(unsigned long long mib, CUdeviceptr *p) {
    size_t bytes = (size_t)(mib * MIB);
    switch (o.kind) {
    case A_MEM: return api.MemAlloc ? api.MemAlloc(p, bytes) : CUDA_ERROR_NOT_FOUND;
    case A_MANAGED: return api.MemAllocManaged ? api.MemAllocManaged(p, bytes, CU_MEM_ATTACH_GLOBAL) : CUDA_ERROR_NOT_FOUND;
    case A_PITCH: {
        size_t pitch;
        return api.MemAllocPitch ? api.MemAllocPitch(p, &pitch, MIB, (size_t)mib, 4) : CUDA_ERROR_NOT_FOUND;
    }
    case A_ASYNC: return api.MemAllocAsync ? api.MemAllocAsync(p, bytes, NULL) : CUDA_ERROR_NOT_FOUND;
    case A_VMM: {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        return api.MemCreate ? api.MemCreate((CUmemGenericAllocationHandle *)p, bytes, &prop, 0) : CUDA_ERROR_NOT_FOUND;
    }
    case A_ARRAY: {
        /* 65536 texels x 16 bytes = 1 MiB per row, one row per MiB */
        CUDA_ARRAY_DESCRIPTOR d = {65536, (size_t)mib, CU_AD_FORMAT_UNSIGNED_INT32, 4};
        CUarray a = NULL;
        CUresult r = api.ArrayCreate ? api.ArrayCreate(&a, &d) : CUDA_ERROR_NOT_FOUND;
        *p = (CUdeviceptr)(uintptr_t)a;
        return r;
    }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static void free_one(CUdeviceptr p) {
    switch (o.kind) {
    case A_ASYNC: api.MemFreeAsync(p, NULL); break;
    case A_VMM: api.MemRelease((CUmemGenericAllocationHandle)p); break;
    case A_ARRAY: api.ArrayDestroy((CUarray)(uintptr_t)p); break;
    default: api.MemFree(p);
    }
}

static void *alloc_worker(void *arg) {
    (void)arg;
    CUresult r = api.CtxSetCurrent(ctx); /* the context is per thread, as in the runtime */
    if (r != CUDA_SUCCESS)
        __atomic_store_n(&first_error, r, __ATOMIC_SEQ_CST), __atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&stop, __ATOMIC_SEQ_CST)) {
        unsigned long long i = __atomic_fetch_add(&next_chunk, 1, __ATOMIC_SEQ_CST);
        if (i >= nchunks)
            break;
        r = alloc_one(chunks[i].mib, &chunks[i].p);
        if (r == CUDA_SUCCESS) {
            __atomic_add_fetch(&granted, chunks[i].mib, __ATOMIC_SEQ_CST);
            continue;
        }
        chunks[i].p = 0;
        int zero = 0;
        __atomic_compare_exchange_n(&first_error, &zero, (int)r, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        __atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

/* An empty kernel as PTX: the real driver JIT-compiles it for any GPU; fakegpu accepts it. */
static const char ptx[] = ".version 6.0\n.target sm_50\n.address_size 64\n"
                          ".visible .entry limitbed_idle()\n{\n\tret;\n}\n";

static CUresult launch_all(unsigned long long *done) {
    CUmodule mod;
    CUfunction fn;
    *done = 0;
    if (!api.ModuleLoadData || !api.ModuleGetFunction || !api.LaunchKernel)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = api.ModuleLoadData(&mod, ptx);
    if (r == CUDA_SUCCESS)
        r = api.ModuleGetFunction(&fn, mod, "limitbed_idle");
    for (; r == CUDA_SUCCESS && *done < o.launches; ++*done)
        r = api.LaunchKernel(fn, (unsigned)o.blocks, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    CUresult s = api.CtxSynchronize();
    return r != CUDA_SUCCESS ? r : s;
}

static volatile sig_atomic_t got_signal;
static void on_signal(int s) { (void)s, got_signal = 1; }

static void json_str(const char *key, const char *v) {
    printf(",\"%s\":", key);
    if (!v) {
        printf("null");
        return;
    }
    putchar('"');
    for (; *v; v++)
        if (*v == '"' || *v == '\\')
            printf("\\%c", *v);
        else if ((unsigned char)*v >= 0x20)
            putchar(*v);
    putchar('"');
}

/* --spread N: also hold --mib on each of the devices after --device, up to N devices in all, one
 * primary context each (a process of a pod with several GPUs: what the node's accounting sees). A
 * refusal there is reported on stderr; the JSON line speaks for --device. */
static void spread_to_others(void) {
    for (int d = o.device + 1; d < o.device + o.spread; d++) {
        CUdevice other;
        CUcontext c;
        CUdeviceptr p;
        CUresult r = api.DeviceGet(&other, d);
        if (r == CUDA_SUCCESS)
            r = api.DevicePrimaryCtxRetain(&c, other);
        if (r == CUDA_SUCCESS)
            r = api.CtxSetCurrent(c);
        if (r == CUDA_SUCCESS && o.mib)
            r = api.MemAlloc(&p, o.mib * MIB);
        if (r != CUDA_SUCCESS)
            fprintf(stderr, "cudaprobe: --spread: device %d: error %d\n", d, (int)r);
    }
    if (o.spread > 1)
        api.CtxSetCurrent(ctx);
}

/* cuInit, the device, its name and UUID, its primary context made current; NULL, or what failed
 * (eb: 48 bytes for an error name). */
static const char *driver_init(int *version, char name[128], char uuid[64], char *eb) {
    const char *msg = load_api(), *init_err = NULL;
    CUresult r = msg ? CUDA_ERROR_NOT_FOUND : api.Init(0);
    if (r == CUDA_SUCCESS && api.DriverGetVersion)
        api.DriverGetVersion(version);
    if (r == CUDA_SUCCESS)
        r = api.DeviceGet(&dev, o.device);
    if (r == CUDA_SUCCESS) {
        CUuuid u;
        api.DeviceGetName(name, 128, dev);
        if (api.DeviceGetUuid(&u, dev) == CUDA_SUCCESS) {
            const unsigned char *b = (const unsigned char *)u.bytes;
            snprintf(uuid, 64, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                     b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
        }
        r = api.DevicePrimaryCtxRetain(&ctx, dev);
    }
    if (r == CUDA_SUCCESS)
        r = api.CtxSetCurrent(ctx);
    if (r != CUDA_SUCCESS) {
        init_err = msg ? msg : err_name(r, eb, 48);
        fprintf(stderr, "cudaprobe: driver init failed: %s\n", init_err);
    }
    return init_err;
}

/* --hold / --hold-signal, then every chunk freed and the primary context released. */
static void hold_then_free(void) {
    if (o.hold_signal)
        while (!got_signal)
            pause();
    else if (o.hold > 0) {
        struct timespec ts = {(time_t)o.hold, (long)((o.hold - (double)(time_t)o.hold) * 1e9)};
        while (!got_signal && nanosleep(&ts, &ts) == -1 && errno == EINTR)
            ;
    }
    for (unsigned long long i = 0; i < nchunks; i++)
        if (chunks[i].p)
            free_one(chunks[i].p);
    free(chunks);
    api.DevicePrimaryCtxRelease(dev);
}

/* --leader-exits: another thread holds and frees, then ends the process; the main thread has exited
 * (a zombie leader whose process still holds its memory, as the node's monitor must attribute it). */
static void *hold_then_exit(void *arg) {
    (void)arg;
    hold_then_free();
    exit(0);
}

int main(int argc, char **argv) {
    if (parse(argc, argv) != 0)
        return 2;
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    char eb[2][48], name[128] = "", uuid[64] = "";
    int version = 0;
    const char *init_err = driver_init(&version, name, uuid, eb[0]);

    unsigned long long launched = 0;
    const char *launch_err = NULL;
    size_t freeb = 0, totalb = 0;
    if (!init_err) {
        nchunks = (o.mib + o.chunk_mib - 1) / o.chunk_mib;
        chunks = calloc(nchunks ? nchunks : 1, sizeof *chunks);
        for (unsigned long long i = 0; i < nchunks; i++)
            chunks[i].mib = i + 1 < nchunks ? o.chunk_mib : o.mib - i * o.chunk_mib;
        pthread_t th[64];
        for (int t = 0; t < o.threads; t++)
            pthread_create(&th[t], NULL, alloc_worker, NULL);
        for (int t = 0; t < o.threads; t++)
            pthread_join(th[t], NULL);
        if (o.kind == A_ASYNC)
            api.CtxSynchronize();
        if (o.launches) {
            CUresult lr = launch_all(&launched);
            if (lr != CUDA_SUCCESS)
                launch_err = err_name(lr, eb[1], sizeof eb[1]);
        }
        api.MemGetInfo(&freeb, &totalb);
        spread_to_others();
    }

    printf("{\"requested_mib\":%llu,\"granted_mib\":%llu", o.mib, granted);
    json_str("error", init_err ? init_err : first_error ? err_name((CUresult)first_error, eb[0], sizeof eb[0]) : NULL);
    printf(",\"total_mib\":%llu,\"free_mib\":%llu,\"pid\":%d", (unsigned long long)(totalb / MIB),
           (unsigned long long)(freeb / MIB), (int)getpid());
    json_str("api", o.api);
    json_str("alloc", alloc_names[o.kind]);
    printf(",\"device\":%d,\"driver_version\":%d,\"threads\":%d,\"launched\":%llu", o.device, version, o.threads, launched);
    json_str("launch_error", launch_err);
    json_str("name", name);
    json_str("uuid", uuid);
    printf("}\n");
    fflush(stdout);
    if (init_err)
        return 1;

    pthread_t holder;
    if (o.leader_exits && pthread_create(&holder, NULL, hold_then_exit, NULL) == 0)
        pthread_exit(NULL);
    hold_then_free();
    return 0;
}
