/*
 * launchprobe: launch kernels back to back for a while and report how much of the wall time the
 * device spent on them, overall and per window. The compute-limit tests and `limitbed bench
 * compute`; it runs on fakegpu and on a real GPU (it only needs libcuda.so.1).
 *
 *   --seconds S       launch for S seconds, then wait for the queued work (cuCtxSynchronize)
 *   --window W        report the busy fraction per W seconds as well (default 1)
 *   --workload K      uniform (default) | mix (kernels of many shapes and durations, like a BLAS
 *                     library's, in a fixed pseudo-random order) | graph (the mix's kernels as one
 *                     executable graph of chained kernel nodes, replayed with cuGraphLaunch) |
 *                     burst (the uniform kernel in bursts of --burst launches, each burst followed
 *                     by cuCtxSynchronize: the shape of latency-bound inference)
 *   --kernel-us U     uniform: each kernel spins U µs per wave of SM-count blocks (the spin kernel:
 *                     fakegpu's fakegpu_spin, PTX on a real GPU). Without it (and for --api legacy)
 *                     an empty kernel runs for FAKEGPU_LAUNCH_NS on fakegpu.
 *   --blocks B        grid blocks per launch of the uniform workload (default 1)
 *   --burst K         burst: launches per burst (default 4)
 *   --api A           kernel (cuLaunchKernel, default) | ex (cuLaunchKernelEx) | coop
 *                     (cuLaunchCooperativeKernel) | multi (cuLaunchCooperativeKernelMultiDevice) |
 *                     legacy (cuFuncSetBlockShape + cuLaunchGrid)
 *   --ex              same as --api ex
 *   --ptsz            fetch the per-thread-default-stream variants through cuGetProcAddress
 *   --device N        launch on CUDA ordinal N (default 0)
 *
 * Work is counted in nominal ns: the spin duration times the waves of the grid (ceil(blocks /
 * SMs)), which is exactly what fakegpu charges; on a real GPU a fraction is only meaningful
 * divided by the same workload's unlimited fraction. A window's fraction is the work launched in
 * it over its wall time: without a sync at its end (a sync would stall the launcher behind other
 * processes' queued work), so the first window of an unthrottled run also counts the queue it
 * filled (up to the driver's launch queue, ~1 s of work). A window's wait is the time the
 * process's threads spent runnable but waiting for a CPU in it (the sum of their schedstat
 * run_delay), over its wall time: a window the machine starved shows as a dip the limit did not
 * make, and the tests re-measure a bound missed in such a run. One JSON line.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "limitbed/cuda_abi.h"

/* Spins for its parameter's ns on the GPU's global timer, in every block. */
static const char spin_ptx[] = ".version 7.0\n"
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
                               "}\n";

/* A BLAS-like mix: grid sizes (in SMs, negative = absolute blocks) and per-wave durations chosen
 * so that blocks say nothing about time (a 1-block 2 ms reduction tail next to 32-wave 40 µs
 * GEMM tiles). Average ~0.9 ms per launch. */
static const struct { int blocks; int per_sm; unsigned us; } mix[] = {
    {-1, 0, 2000}, {8, 1, 100}, {1, 4, 300}, {2, 1, 500}, {-4, 0, 50}, {32, 1, 40}, {-64, 0, 700}, {4, 1, 150},
};
#define NMIX (sizeof mix / sizeof mix[0])

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define MAX_WINDOWS 4096

/* The ns this process's threads have waited, runnable, for a CPU (each /proc/self/task/N/schedstat:
 * "run_ns wait_ns slices"); 0 where there is no schedstat. */
static double cpu_wait_ns(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    double sum = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%.20s/schedstat", e->d_name);
        FILE *f = fopen(path, "re");
        unsigned long long run, wait;
        if (f && fscanf(f, "%llu %llu", &run, &wait) == 2)
            sum += (double)wait;
        if (f)
            fclose(f);
    }
    closedir(d);
    return sum;
}

int main(int argc, char **argv)
{
    double seconds = 3, window = 1;
    unsigned blocks = 1, kernel_us = 0, burst = 4;
    int ptsz = 0, device = 0, is_mix = 0, is_graph = 0, is_burst = 0;
    const char *api = "kernel";
    /* --opt=value is --opt value */
    static char *args[256], buf[4096];
    int nargs = 0;
    size_t used = 0;
    for (int i = 0; i < argc && nargs < 254; i++) {
        char *eq = strchr(argv[i], '=');
        size_t len = strlen(argv[i]);
        if (i > 0 && !strncmp(argv[i], "--", 2) && eq && used + len + 1 <= sizeof buf) {
            char *c = memcpy(buf + used, argv[i], len + 1);
            used += len + 1;
            c[eq - argv[i]] = 0;
            args[nargs++] = c;
            args[nargs++] = c + (eq - argv[i]) + 1;
        } else {
            args[nargs++] = argv[i];
        }
    }
    argc = nargs, argv = args;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--window") && i + 1 < argc)
            window = atof(argv[++i]);
        else if (!strcmp(argv[i], "--blocks") && i + 1 < argc)
            blocks = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kernel-us") && i + 1 < argc)
            kernel_us = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--burst") && i + 1 < argc)
            burst = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workload") && i + 1 < argc) {
            const char *w = argv[++i];
            if (strcmp(w, "uniform") && strcmp(w, "mix") && strcmp(w, "graph") && strcmp(w, "burst")) {
                fprintf(stderr, "launchprobe: --workload %s: want uniform, mix, graph or burst\n", w);
                return 2;
            }
            is_mix = !strcmp(w, "mix");
            is_graph = !strcmp(w, "graph");
            is_burst = !strcmp(w, "burst");
        } else if (!strcmp(argv[i], "--api") && i + 1 < argc)
            api = argv[++i];
        else if (!strcmp(argv[i], "--ex"))
            api = "ex";
        else if (!strcmp(argv[i], "--ptsz"))
            ptsz = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: launchprobe [--seconds S] [--window W] [--workload uniform|mix|graph|burst] "
                            "[--kernel-us U] [--blocks B] [--burst K] [--api kernel|ex|coop|multi|legacy] [--ex] "
                            "[--ptsz] [--device ORDINAL]\n");
            return 2;
        }
    }
    int a_ex = !strcmp(api, "ex"), a_coop = !strcmp(api, "coop"), a_multi = !strcmp(api, "multi"),
        a_legacy = !strcmp(api, "legacy");
    if (!a_ex && !a_coop && !a_multi && !a_legacy && strcmp(api, "kernel")) {
        fprintf(stderr, "launchprobe: --api %s: want kernel, ex, coop, multi or legacy\n", api);
        return 2;
    }
    if (window <= 0 || seconds <= 0 || (a_legacy && (is_mix || is_graph || kernel_us)) || burst < 1) {
        fprintf(stderr, "launchprobe: --seconds and --window must be > 0, --burst at least 1; --api legacy runs the "
                        "empty kernel only\n");
        return 2;
    }
    int spin = is_mix || is_graph || kernel_us;
    const char *ns = getenv("FAKEGPU_LAUNCH_NS");
    double launch_ns = ns ? atof(ns) : 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("{\"error\":\"dlopen\"}\n");
        return 1;
    }
    __typeof__(&cuGetProcAddress_v2) gpa = (__typeof__(gpa))dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        printf("{\"error\":\"no cuGetProcAddress_v2\"}\n");
        return 1;
    }
    cuuint64_t fl = ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    CUdriverProcAddressQueryResult q;
    __typeof__(&cuInit) init = NULL;
    __typeof__(&cuDeviceGet) dget = NULL;
    __typeof__(&cuDeviceGetAttribute) attr = NULL;
    __typeof__(&cuDevicePrimaryCtxRetain) retain = NULL;
    __typeof__(&cuCtxSetCurrent) setcur = NULL;
    __typeof__(&cuCtxSynchronize) sync = NULL;
    __typeof__(&cuModuleLoadData) load = NULL;
    __typeof__(&cuModuleGetFunction) getfn = NULL;
    __typeof__(&cuLaunchKernel) launch = NULL;
    __typeof__(&cuLaunchKernelEx) launch_ex = NULL;
    __typeof__(&cuLaunchCooperativeKernel) launch_coop = NULL;
    __typeof__(&cuLaunchCooperativeKernelMultiDevice) launch_multi = NULL;
    __typeof__(&cuFuncSetBlockShape) shape = NULL;
    __typeof__(&cuLaunchGrid) launch_grid = NULL;
    __typeof__(&cuGraphCreate) gcreate = NULL;
    __typeof__(&cuGraphAddKernelNode_v2) gadd = NULL;
    __typeof__(&cuGraphInstantiateWithFlags) ginst = NULL;
    __typeof__(&cuGraphLaunch) glaunch = NULL;
    gpa("cuInit", (void **)&init, 12000, fl, &q);
    gpa("cuDeviceGet", (void **)&dget, 12000, fl, &q);
    gpa("cuDeviceGetAttribute", (void **)&attr, 12000, fl, &q);
    gpa("cuDevicePrimaryCtxRetain", (void **)&retain, 12000, fl, &q);
    gpa("cuCtxSetCurrent", (void **)&setcur, 12000, fl, &q);
    gpa("cuCtxSynchronize", (void **)&sync, 12000, fl, &q);
    gpa("cuModuleLoadData", (void **)&load, 12000, fl, &q);
    gpa("cuModuleGetFunction", (void **)&getfn, 12000, fl, &q);
    gpa("cuLaunchKernel", (void **)&launch, 12000, fl, &q);
    gpa("cuLaunchKernelEx", (void **)&launch_ex, 12000, fl, &q);
    gpa("cuLaunchCooperativeKernel", (void **)&launch_coop, 12000, fl, &q);
    gpa("cuLaunchCooperativeKernelMultiDevice", (void **)&launch_multi, 12000, fl, &q);
    gpa("cuFuncSetBlockShape", (void **)&shape, 12000, fl, &q);
    gpa("cuLaunchGrid", (void **)&launch_grid, 12000, fl, &q);
    gpa("cuGraphCreate", (void **)&gcreate, 12000, fl, &q);
    gpa("cuGraphAddKernelNode", (void **)&gadd, 12000, fl, &q);
    gpa("cuGraphInstantiateWithFlags", (void **)&ginst, 12000, fl, &q);
    gpa("cuGraphLaunch", (void **)&glaunch, 12000, fl, &q);
    if (!init || !dget || !attr || !retain || !setcur || !sync || !load || !getfn || !launch ||
        (a_ex && !launch_ex) || (a_coop && !launch_coop) || (a_multi && !launch_multi) ||
        (a_legacy && (!shape || !launch_grid)) || (is_graph && (!gcreate || !gadd || !ginst || !glaunch))) {
        printf("{\"error\":\"an entry point is missing\"}\n");
        return 1;
    }
    CUdevice d;
    CUcontext ctx;
    CUresult r;
    int sms = 1;
    if ((r = init(0)) || (r = dget(&d, device)) || (r = retain(&ctx, d)) || (r = setcur(ctx)) ||
        (r = attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d))) {
        printf("{\"error\":\"init %d\"}\n", (int)r);
        return 1;
    }
    if (sms < 1)
        sms = 1;
    static int dummy; /* fakegpu accepts any non-NULL function handle */
    CUfunction fn = (CUfunction)(void *)&dummy;
    if (spin) {
        CUmodule mod;
        if ((r = load(&mod, spin_ptx)) || (r = getfn(&fn, mod, "fakegpu_spin"))) {
            printf("{\"error\":\"spin kernel %d\"}\n", (int)r);
            return 1;
        }
    }
    if (a_legacy && (r = shape(fn, 1, 1, 1))) {
        printf("{\"error\":\"cuFuncSetBlockShape %d\"}\n", (int)r);
        return 1;
    }
    /* The graph: every kernel of the mix once, chained; its parameters are copied at creation. */
    CUgraphExec gx = NULL;
    double graph_ns = 0;
    static unsigned long long gns[NMIX];
    if (is_graph) {
        CUgraph g;
        CUgraphNode prev = NULL, node;
        if ((r = gcreate(&g, 0))) {
            printf("{\"error\":\"cuGraphCreate %d\"}\n", (int)r);
            return 1;
        }
        for (unsigned m = 0; m < NMIX; m++) {
            unsigned b = mix[m].blocks < 0 ? (unsigned)-mix[m].blocks : (unsigned)(mix[m].blocks * sms / mix[m].per_sm);
            b = b ? b : 1;
            gns[m] = (unsigned long long)mix[m].us * 1000;
            void *params[] = {&gns[m]};
            CUDA_KERNEL_NODE_PARAMS_v2 kp;
            memset(&kp, 0, sizeof kp);
            kp.func = fn, kp.gridDimX = b, kp.gridDimY = 1, kp.gridDimZ = 1;
            kp.blockDimX = 1, kp.blockDimY = 1, kp.blockDimZ = 1, kp.kernelParams = params;
            if ((r = gadd(&node, g, prev ? &prev : NULL, prev ? 1 : 0, &kp))) {
                printf("{\"error\":\"cuGraphAddKernelNode %d\"}\n", (int)r);
                return 1;
            }
            prev = node;
            graph_ns += (double)gns[m] * (double)((b + (unsigned)sms - 1) / (unsigned)sms);
        }
        if ((r = ginst(&gx, g, 0))) {
            printf("{\"error\":\"cuGraphInstantiateWithFlags %d\"}\n", (int)r);
            return 1;
        }
    }
    static double win[MAX_WINDOWS], waits[MAX_WINDOWS];
    int nwin = 0;
    double wait0 = cpu_wait_ns();
    unsigned long long n = 0, k = 0;
    double work_ns = 0, win_ns = 0;
    double t0 = now_s(), end = t0 + seconds, wstart = t0;
    r = CUDA_SUCCESS;
    CUresult sr = CUDA_SUCCESS;
    uint32_t lcg = 12345;
    while (r == CUDA_SUCCESS && sr == CUDA_SUCCESS && now_s() < end) {
        unsigned b = blocks;
        unsigned long long kns = (unsigned long long)kernel_us * 1000;
        if (is_mix) {
            lcg = lcg * 1103515245u + 12345u;
            unsigned m = (lcg >> 16) % NMIX;
            b = mix[m].blocks < 0 ? (unsigned)-mix[m].blocks : (unsigned)(mix[m].blocks * sms / mix[m].per_sm);
            if (!b)
                b = 1;
            kns = (unsigned long long)mix[m].us * 1000;
        }
        double nominal = spin ? (double)kns * (double)((b + (unsigned)sms - 1) / (unsigned)sms) : launch_ns;
        void *params[] = {&kns};
        void **pp = spin ? params : NULL;
        if (is_graph) {
            nominal = graph_ns;
            r = glaunch(gx, NULL);
        } else if (a_ex) {
            CUlaunchConfig cfg;
            memset(&cfg, 0, sizeof cfg);
            cfg.gridDimX = b, cfg.gridDimY = 1, cfg.gridDimZ = 1;
            cfg.blockDimX = 1, cfg.blockDimY = 1, cfg.blockDimZ = 1;
            r = launch_ex(&cfg, fn, pp, NULL);
        } else if (a_coop) {
            r = launch_coop(fn, b, 1, 1, 1, 1, 1, 0, NULL, pp);
        } else if (a_multi) {
            CUDA_LAUNCH_PARAMS lp = {fn, b, 1, 1, 1, 1, 1, 0, NULL, pp};
            r = launch_multi(&lp, 1, 0);
        } else if (a_legacy) {
            r = launch_grid(fn, (int)b, 1);
        } else {
            r = launch(fn, b, 1, 1, 1, 1, 1, 0, NULL, pp, NULL);
        }
        if (r != CUDA_SUCCESS)
            break;
        n++, k++;
        if (is_burst && k % burst == 0 && (sr = sync()) != CUDA_SUCCESS)
            break;
        work_ns += nominal, win_ns += nominal;
        double t = now_s();
        if (t - wstart >= window) {
            double w = cpu_wait_ns();
            if (nwin < MAX_WINDOWS) {
                waits[nwin] = (w - wait0) / 1e9 / (t - wstart);
                win[nwin++] = win_ns / 1e9 / (t - wstart);
            }
            win_ns = 0, wstart = t, wait0 = w;
        }
    }
    if (sr == CUDA_SUCCESS)
        sr = sync();
    double elapsed = now_s() - t0;
    printf("{\"launches\":%llu,\"launch_error\":%d,\"sync_error\":%d,\"elapsed_s\":%.3f,\"busy_s\":%.3f,"
           "\"busy_fraction\":%.4f,\"sms\":%d,\"windows\":[",
           n, (int)r, (int)sr, elapsed, work_ns / 1e9, work_ns / 1e9 / elapsed, sms);
    for (int i = 0; i < nwin; i++)
        printf("%s%.4f", i ? "," : "", win[i]);
    printf("],\"waits\":[");
    for (int i = 0; i < nwin; i++)
        printf("%s%.4f", i ? "," : "", waits[i]);
    printf("]}\n");
    (void)k;
    return r == CUDA_SUCCESS && sr == CUDA_SUCCESS ? 0 : 1;
}
