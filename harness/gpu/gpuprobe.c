/* gpuprobe: the GPU tier's native probes (gpuprobe.h says what each prints). */
#include "gpuprobe.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024.0 * 1024.0)

/* Spins for its parameter's ns on the GPU's global timer (fakegpu prices fakegpu_spin the same);
 * empty_kernel does nothing. The same text as hamicore/test/launchprobe.c's. */
static const char ptx[] = ".version 7.0\n"
                          ".target sm_70\n"
                          ".address_size 64\n"
                          ".visible .entry fakegpu_spin(.param .u64 ns)\n"
                          "{\n"
                          "  .reg .pred p;\n"
                          "  .reg .u64 t0, t1, d, n;\n"
                          "  ld.param.u64 n, [ns];\n"
                          "  mov.u64 t0, %globaltimer;\n"
                          "LOOP:\n"
                          "  mov.u64 t1, %globaltimer;\n"
                          "  sub.u64 d, t1, t0;\n"
                          "  setp.lt.u64 p, d, n;\n"
                          "  @p bra LOOP;\n"
                          "  ret;\n"
                          "}\n"
                          ".visible .entry empty_kernel()\n"
                          "{\n"
                          "  ret;\n"
                          "}\n";

double gp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void gp_sleep(double s) {
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

const char *gp_cu_err(CUresult r) {
    static char buf[32];
    const char *s = NULL;
    if (cuGetErrorName(r, &s) == CUDA_SUCCESS && s)
        return s;
    snprintf(buf, sizeof buf, "CUDA_ERROR_%d", (int)r);
    return buf;
}

int gp_fail(const char *what, const char *err) {
    printf("{\"error\":\"%s: %s\"}\n", what, err);
    return 1;
}

int gp_context(CUdevice *dev) {
    CUresult r;
    CUcontext ctx;
    if ((r = cuInit(0)) != CUDA_SUCCESS)
        return gp_fail("cuInit", gp_cu_err(r));
    if ((r = cuDeviceGet(dev, 0)) != CUDA_SUCCESS)
        return gp_fail("cuDeviceGet", gp_cu_err(r));
    if ((r = cuDevicePrimaryCtxRetain(&ctx, *dev)) != CUDA_SUCCESS)
        return gp_fail("cuDevicePrimaryCtxRetain", gp_cu_err(r));
    if ((r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS)
        return gp_fail("cuCtxSetCurrent", gp_cu_err(r));
    return 0;
}

int gp_spin_function(CUfunction *f, const char *name) {
    static CUmodule mod;
    CUresult r;
    if (!mod && (r = cuModuleLoadData(&mod, ptx)) != CUDA_SUCCESS)
        return gp_fail("cuModuleLoadData", gp_cu_err(r));
    if ((r = cuModuleGetFunction(f, mod, name)) != CUDA_SUCCESS)
        return gp_fail("cuModuleGetFunction", gp_cu_err(r));
    return 0;
}

/* An NVML entry point our headers do not declare (optional: 0 where the library has none). */
static unsigned nvml_uint(const char *sym, nvmlDevice_t d, int arg) {
    unsigned v = 0;
    void *fn = dlsym(RTLD_DEFAULT, sym);
    if (!fn)
        return 0;
    if (arg >= 0) {
        nvmlReturn_t (*f)(nvmlDevice_t, nvmlClockType_t, unsigned *) = (nvmlReturn_t (*)(nvmlDevice_t, nvmlClockType_t, unsigned *))fn;
        return f(d, (nvmlClockType_t)arg, &v) == NVML_SUCCESS ? v : 0;
    }
    nvmlReturn_t (*f)(nvmlDevice_t, unsigned *) = (nvmlReturn_t (*)(nvmlDevice_t, unsigned *))fn;
    return f(d, &v) == NVML_SUCCESS ? v : 0;
}

static int card(void) {
    nvmlReturn_t n;
    nvmlDevice_t d;
    unsigned count = 0, sm = 0, mem = 0;
    char name[96] = "", uuid[96] = "", drv[80] = "";
    nvmlMemory_t m = {0};
    int cuda = 0, major = 0, minor = 0, sms = 0;
    if ((n = nvmlInit_v2()) != NVML_SUCCESS)
        return gp_fail("nvmlInit_v2", nvmlErrorString(n));
    if ((n = nvmlDeviceGetCount_v2(&count)) != NVML_SUCCESS || count == 0)
        return gp_fail("nvmlDeviceGetCount_v2", n != NVML_SUCCESS ? nvmlErrorString(n) : "no GPU");
    if ((n = nvmlDeviceGetHandleByIndex_v2(0, &d)) != NVML_SUCCESS)
        return gp_fail("nvmlDeviceGetHandleByIndex_v2", nvmlErrorString(n));
    nvmlDeviceGetName(d, name, sizeof name);
    nvmlDeviceGetUUID(d, uuid, sizeof uuid);
    nvmlSystemGetDriverVersion(drv, sizeof drv);
    nvmlSystemGetCudaDriverVersion(&cuda);
    nvmlDeviceGetMemoryInfo(d, &m);
    nvmlDeviceGetCudaComputeCapability(d, &major, &minor);
    nvmlDeviceGetClockInfo(d, NVML_CLOCK_SM, &sm);
    nvmlDeviceGetClockInfo(d, NVML_CLOCK_MEM, &mem);
    unsigned max_sm = nvml_uint("nvmlDeviceGetMaxClockInfo", d, NVML_CLOCK_SM);
    unsigned power_mw = nvml_uint("nvmlDeviceGetPowerManagementLimit", d, -1);
    CUdevice dev;
    if (cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&dev, 0) == CUDA_SUCCESS)
        cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    for (char *p = name; *p; p++)
        if (*p == '"' || *p == '\\')
            *p = '\'';
    printf("{\"name\":\"%s\",\"uuid\":\"%s\",\"gpus\":%u,\"memory_mib\":%.0f,\"driver_version\":\"%s\","
           "\"cuda_version\":\"%d.%d\",\"sm_count\":%d,\"compute_capability\":\"%d.%d\",\"clock_sm_mhz\":%u,"
           "\"clock_sm_max_mhz\":%u,\"clock_mem_mhz\":%u,\"power_limit_w\":%.0f}\n",
           name, uuid, count, (double)m.total / MIB, drv, cuda / 1000, (cuda % 1000) / 10, sms, major, minor, sm, max_sm,
           mem, power_mw / 1000.0);
    nvmlShutdown();
    return 0;
}

/* own_mib: this process's memory on the first GPU by the driver's per-process record (-1: none). */
static double own_mib(nvmlDevice_t d) {
    nvmlProcessInfo_t info[256];
    unsigned count = 256;
    if (nvmlDeviceGetComputeRunningProcesses_v3(d, &count, info) != NVML_SUCCESS)
        return -1;
    for (unsigned i = 0; i < count; i++)
        if (info[i].pid == (unsigned)getpid())
            return (double)info[i].usedGpuMemory / MIB;
    return -1;
}

static double used_mib(nvmlDevice_t d) {
    nvmlMemory_t m = {0};
    return nvmlDeviceGetMemoryInfo(d, &m) == NVML_SUCCESS ? (double)m.used / MIB : -1;
}

/* The driver's figures settle a moment after a context or an allocation (NVML reads them). */
#define SETTLE 0.3
#define SMALL 64 /* small allocations of 1 MiB */

static int memory(void) {
    nvmlDevice_t d;
    nvmlReturn_t n;
    CUdevice dev;
    if ((n = nvmlInit_v2()) != NVML_SUCCESS || (n = nvmlDeviceGetHandleByIndex_v2(0, &d)) != NVML_SUCCESS)
        return gp_fail("nvmlInit_v2", nvmlErrorString(n));
    nvmlMemory_t m = {0};
    nvmlDeviceGetMemoryInfo(d, &m);
    double dev_before = used_mib(d);
    int rc = gp_context(&dev);
    if (rc)
        return rc;
    gp_sleep(SETTLE);
    double ctx = own_mib(d), dev_ctx = used_mib(d) - dev_before;
    size_t free0 = 0, total = 0, free1 = 0, tmem = 0;
    cuMemGetInfo(&free0, &total);
    cuDeviceTotalMem(&tmem, dev);
    CUdeviceptr p[SMALL];
    for (int i = 0; i < SMALL; i++) {
        CUresult r = cuMemAlloc(&p[i], 1 << 20);
        if (r != CUDA_SUCCESS)
            return gp_fail("cuMemAlloc 1 MiB", gp_cu_err(r));
    }
    gp_sleep(SETTLE);
    double after = own_mib(d);
    cuMemGetInfo(&free1, &total);
    for (int i = 0; i < SMALL; i++)
        cuMemFree(p[i]);
    size_t gmin = 0, grec = 0;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    cuMemGetAllocationGranularity(&gmin, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    cuMemGetAllocationGranularity(&grec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    printf("{\"ctx_mib\":%.1f,\"ctx_device_mib\":%.1f,\"alloc_mib_per_1mib\":%.3f,\"meminfo_per_1mib\":%.3f,"
           "\"meminfo_total_mib\":%.0f,\"total_mem_mib\":%.0f,\"nvml_total_mib\":%.0f,\"vmm_min_kib\":%.0f,"
           "\"vmm_recommended_kib\":%.0f}\n",
           ctx, dev_ctx, ctx >= 0 && after >= 0 ? (after - ctx) / SMALL : -1, ((double)free0 - (double)free1) / MIB / SMALL,
           (double)total / MIB, (double)tmem / MIB, (double)m.total / MIB, gmin / 1024.0, grec / 1024.0);
    nvmlShutdown();
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, unsigned n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n ? v[n / 2] : 0;
}

static int launch(const gp_opts *o) {
    CUdevice dev;
    CUfunction f;
    int rc = gp_context(&dev);
    if (rc || (rc = gp_spin_function(&f, "empty_kernel")))
        return rc;
    unsigned n = o->n ? o->n : 2000;
    double *call = calloc(n, sizeof *call), *trip = calloc(n, sizeof *trip);
    if (!call || !trip)
        return gp_fail("calloc", "out of memory");
    for (unsigned i = 0; i < 16; i++) /* warm: the first launches load the module */
        cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    cuCtxSynchronize();
    for (unsigned i = 0; i < n; i++) {
        double t = gp_now();
        CUresult r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        call[i] = (gp_now() - t) * 1e6;
        if (r != CUDA_SUCCESS)
            return gp_fail("cuLaunchKernel", gp_cu_err(r));
        if (i % 64 == 63)
            cuCtxSynchronize();
    }
    cuCtxSynchronize();
    for (unsigned i = 0; i < n; i++) {
        double t = gp_now();
        cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        cuCtxSynchronize();
        trip[i] = (gp_now() - t) * 1e6;
    }
    printf("{\"n\":%u,\"launch_us\":%.2f,\"roundtrip_us\":%.2f}\n", n, median(call, n), median(trip, n));
    free(call);
    free(trip);
    return 0;
}

static int usage(const char *why) {
    fprintf(stderr, "gpuprobe: %s\nusage: gpuprobe card | memory | launch [--n N] | load --seconds S [--duty D] [--kernel-us U]\n"
                    "       | clocks --seconds S [--every-ms M] [--skip S0] | samples --seconds S [--every-ms M]\n",
            why);
    return 2;
}

static int options(int argc, char **argv, gp_opts *o) {
    *o = (gp_opts){.seconds = 3, .duty = 1, .every_ms = 100, .kernel_us = 1000};
    for (int i = 2; i < argc; i++) {
        if (i + 1 >= argc)
            return usage("an option without its value");
        char *end;
        double v = strtod(argv[i + 1], &end);
        if (*end || v < 0)
            return usage("an option's value is not a number");
        if (!strcmp(argv[i], "--seconds"))
            o->seconds = v;
        else if (!strcmp(argv[i], "--duty"))
            o->duty = v;
        else if (!strcmp(argv[i], "--skip"))
            o->skip = v;
        else if (!strcmp(argv[i], "--every-ms"))
            o->every_ms = (unsigned)v;
        else if (!strcmp(argv[i], "--kernel-us"))
            o->kernel_us = (unsigned)v;
        else if (!strcmp(argv[i], "--n"))
            o->n = (unsigned)v;
        else
            return usage("unknown option");
        i++;
    }
    if (o->duty <= 0 || o->duty > 1 || o->every_ms == 0 || o->kernel_us == 0)
        return usage("--duty wants 0 < D <= 1, --every-ms and --kernel-us more than 0");
    return 0;
}

int main(int argc, char **argv) {
    gp_opts o;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2)
        return usage("no probe named");
    int rc = options(argc, argv, &o);
    if (rc)
        return rc;
    const char *c = argv[1];
    if (!strcmp(c, "card"))
        return card();
    if (!strcmp(c, "memory"))
        return memory();
    if (!strcmp(c, "launch"))
        return launch(&o);
    if (!strcmp(c, "load"))
        return gp_load(&o);
    if (!strcmp(c, "clocks"))
        return gp_clocks(&o);
    if (!strcmp(c, "samples"))
        return gp_samples(&o);
    return usage("unknown probe");
}
