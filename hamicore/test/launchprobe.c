/*
 * launchprobe: launch kernels back to back for a while and report how much of the wall time the
 * device spent on them, overall and per window. The compute-limit tests and `limitbed bench
 * compute`; it runs on fakegpu and on a real GPU (it only needs libcuda.so.1).
 *
 *   --seconds S       launch for S seconds, then wait for the queued work (cuCtxSynchronize)
 *   --window W        report the busy fraction per W seconds as well (default 1)
 *   --workload K      uniform (default) | mix (kernels of many shapes and durations, like a BLAS
 *                     library's: a pseudo-random order of 64 launches, repeated as a training or
 *                     inference loop repeats its step's kernels) | graph (the mix's kernels as one
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
 *   --die-after S     SIGKILL itself S seconds in, right after a launch: a process that dies while
 *                     its work runs under its container's slice (joined, never drained), as a
 *                     benchmark's worker killed by its parent or a crash
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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
 * GEMM tiles). A step's 64 launches average 0.83 ms each on an H200 (132 SMs), 1.29 ms on a16-16q
 * (10 SMs). */
static const struct { int blocks; int per_sm; unsigned us; } mix[] = {
    {-1, 0, 2000}, {8, 1, 100}, {1, 4, 300}, {2, 1, 500}, {-4, 0, 50}, {32, 1, 40}, {-64, 0, 700}, {4, 1, 150},
};
#define NMIX (sizeof mix / sizeof mix[0])
#define MIX_STEP 64 /* launches of the mix's step: ~83 ms of work on a16-16q, ~53 ms on an H200 */

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

/* What the command line asks for. */
struct opts {
    double seconds, window, die_after;
    unsigned blocks, kernel_us, burst;
    int ptsz, device, is_mix, is_graph, is_burst, spin;
    int a_ex, a_coop, a_multi, a_legacy;
};

/* --opt=value is --opt value: argv rewritten into args (static storage). */
static int split_equals(int argc, char **argv, char ***out)
{
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
    *out = args;
    return nargs;
}

/* 0, or 2 after a usage message. */
static int parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.seconds = 3, .window = 1, .blocks = 1, .burst = 4};
    const char *api = "kernel";
    argc = split_equals(argc, argv, &argv);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            o->seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--window") && i + 1 < argc)
            o->window = atof(argv[++i]);
        else if (!strcmp(argv[i], "--blocks") && i + 1 < argc)
            o->blocks = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kernel-us") && i + 1 < argc)
            o->kernel_us = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--burst") && i + 1 < argc)
            o->burst = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workload") && i + 1 < argc) {
            const char *w = argv[++i];
            if (strcmp(w, "uniform") && strcmp(w, "mix") && strcmp(w, "graph") && strcmp(w, "burst")) {
                fprintf(stderr, "launchprobe: --workload %s: want uniform, mix, graph or burst\n", w);
                return 2;
            }
            o->is_mix = !strcmp(w, "mix");
            o->is_graph = !strcmp(w, "graph");
            o->is_burst = !strcmp(w, "burst");
        } else if (!strcmp(argv[i], "--api") && i + 1 < argc)
            api = argv[++i];
        else if (!strcmp(argv[i], "--ex"))
            api = "ex";
        else if (!strcmp(argv[i], "--ptsz"))
            o->ptsz = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            o->device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--die-after") && i + 1 < argc)
            o->die_after = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: launchprobe [--seconds S] [--window W] [--workload uniform|mix|graph|burst] "
                            "[--kernel-us U] [--blocks B] [--burst K] [--api kernel|ex|coop|multi|legacy] [--ex] "
                            "[--ptsz] [--device ORDINAL] [--die-after S]\n");
            return 2;
        }
    }
    o->a_ex = !strcmp(api, "ex"), o->a_coop = !strcmp(api, "coop"), o->a_multi = !strcmp(api, "multi"),
    o->a_legacy = !strcmp(api, "legacy");
    if (!o->a_ex && !o->a_coop && !o->a_multi && !o->a_legacy && strcmp(api, "kernel")) {
        fprintf(stderr, "launchprobe: --api %s: want kernel, ex, coop, multi or legacy\n", api);
        return 2;
    }
    if (o->window <= 0 || o->seconds <= 0 || (o->a_legacy && (o->is_mix || o->is_graph || o->kernel_us)) ||
        o->burst < 1) {
        fprintf(stderr, "launchprobe: --seconds and --window must be > 0, --burst at least 1; --api legacy runs the "
                        "empty kernel only\n");
        return 2;
    }
    o->spin = o->is_mix || o->is_graph || o->kernel_us;
    return 0;
}

/* The driver's entry points, all fetched through cuGetProcAddress_v2. */
struct api {
    __typeof__(&cuInit) init;
    __typeof__(&cuDeviceGet) dget;
    __typeof__(&cuDeviceGetAttribute) attr;
    __typeof__(&cuDevicePrimaryCtxRetain) retain;
    __typeof__(&cuCtxSetCurrent) setcur;
    __typeof__(&cuCtxSynchronize) sync;
    __typeof__(&cuModuleLoadData) load;
    __typeof__(&cuModuleGetFunction) getfn;
    __typeof__(&cuLaunchKernel) launch;
    __typeof__(&cuLaunchKernelEx) launch_ex;
    __typeof__(&cuLaunchCooperativeKernel) launch_coop;
    __typeof__(&cuLaunchCooperativeKernelMultiDevice) launch_multi;
    __typeof__(&cuFuncSetBlockShape) shape;
    __typeof__(&cuLaunchGrid) launch_grid;
    __typeof__(&cuGraphCreate) gcreate;
    __typeof__(&cuGraphAddKernelNode_v2) gadd;
    __typeof__(&cuGraphInstantiateWithFlags) ginst;
    __typeof__(&cuGraphLaunch) glaunch;
};

/* NULL, or the error line's text. */
static const char *load_api(const struct opts *o, struct api *x)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return "dlopen";
    __typeof__(&cuGetProcAddress_v2) gpa = (__typeof__(gpa))dlsym(h, "cuGetProcAddress_v2");
    if (!gpa)
        return "no cuGetProcAddress_v2";
    cuuint64_t fl = o->ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    CUdriverProcAddressQueryResult q;
    memset(x, 0, sizeof *x);
    gpa("cuInit", (void **)&x->init, 12000, fl, &q);
    gpa("cuDeviceGet", (void **)&x->dget, 12000, fl, &q);
    gpa("cuDeviceGetAttribute", (void **)&x->attr, 12000, fl, &q);
    gpa("cuDevicePrimaryCtxRetain", (void **)&x->retain, 12000, fl, &q);
    gpa("cuCtxSetCurrent", (void **)&x->setcur, 12000, fl, &q);
    gpa("cuCtxSynchronize", (void **)&x->sync, 12000, fl, &q);
    gpa("cuModuleLoadData", (void **)&x->load, 12000, fl, &q);
    gpa("cuModuleGetFunction", (void **)&x->getfn, 12000, fl, &q);
    gpa("cuLaunchKernel", (void **)&x->launch, 12000, fl, &q);
    gpa("cuLaunchKernelEx", (void **)&x->launch_ex, 12000, fl, &q);
    gpa("cuLaunchCooperativeKernel", (void **)&x->launch_coop, 12000, fl, &q);
    gpa("cuLaunchCooperativeKernelMultiDevice", (void **)&x->launch_multi, 12000, fl, &q);
    gpa("cuFuncSetBlockShape", (void **)&x->shape, 12000, fl, &q);
    gpa("cuLaunchGrid", (void **)&x->launch_grid, 12000, fl, &q);
    gpa("cuGraphCreate", (void **)&x->gcreate, 12000, fl, &q);
    gpa("cuGraphAddKernelNode", (void **)&x->gadd, 12000, fl, &q);
    gpa("cuGraphInstantiateWithFlags", (void **)&x->ginst, 12000, fl, &q);
    gpa("cuGraphLaunch", (void **)&x->glaunch, 12000, fl, &q);
    if (!x->init || !x->dget || !x->attr || !x->retain || !x->setcur || !x->sync || !x->load || !x->getfn ||
        !x->launch || (o->a_ex && !x->launch_ex) || (o->a_coop && !x->launch_coop) ||
        (o->a_multi && !x->launch_multi) || (o->a_legacy && (!x->shape || !x->launch_grid)) ||
        (o->is_graph && (!x->gcreate || !x->gadd || !x->ginst || !x->glaunch)))
        return "an entry point is missing";
    return NULL;
}

/* A mix kernel's grid on a device of sms SMs. */
static unsigned mix_blocks(unsigned m, int sms)
{
    unsigned b = mix[m].blocks < 0 ? (unsigned)-mix[m].blocks : (unsigned)(mix[m].blocks * sms / mix[m].per_sm);
    return b ? b : 1;
}

/* The graph: every kernel of the mix once, chained; its parameters are copied at creation. Its
 * nominal ns into *graph_ns; 0 or the failing call's error (printed). */
static CUresult make_graph(const struct api *x, CUfunction fn, int sms, CUgraphExec *gx, double *graph_ns)
{
    static unsigned long long gns[NMIX];
    CUgraph g;
    CUgraphNode prev = NULL, node;
    CUresult r;
    if ((r = x->gcreate(&g, 0))) {
        printf("{\"error\":\"cuGraphCreate %d\"}\n", (int)r);
        return r;
    }
    for (unsigned m = 0; m < NMIX; m++) {
        unsigned b = mix_blocks(m, sms);
        gns[m] = (unsigned long long)mix[m].us * 1000;
        void *params[] = {&gns[m]};
        CUDA_KERNEL_NODE_PARAMS_v2 kp;
        memset(&kp, 0, sizeof kp);
        kp.func = fn, kp.gridDimX = b, kp.gridDimY = 1, kp.gridDimZ = 1;
        kp.blockDimX = 1, kp.blockDimY = 1, kp.blockDimZ = 1, kp.kernelParams = params;
        if ((r = x->gadd(&node, g, prev ? &prev : NULL, prev ? 1 : 0, &kp))) {
            printf("{\"error\":\"cuGraphAddKernelNode %d\"}\n", (int)r);
            return r;
        }
        prev = node;
        *graph_ns += (double)gns[m] * (double)((b + (unsigned)sms - 1) / (unsigned)sms);
    }
    if ((r = x->ginst(gx, g, 0)))
        printf("{\"error\":\"cuGraphInstantiateWithFlags %d\"}\n", (int)r);
    return r;
}

/* The device's primary context made current, its SM count, the kernel (the spin kernel or any
 * handle), and the graph: 0, or 1 after the error line. */
static int setup(const struct opts *o, const struct api *x, int *sms, CUfunction *fn, CUgraphExec *gx,
                 double *graph_ns)
{
    CUdevice d;
    CUcontext ctx;
    CUresult r;
    if ((r = x->init(0)) || (r = x->dget(&d, o->device)) || (r = x->retain(&ctx, d)) || (r = x->setcur(ctx)) ||
        (r = x->attr(sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d))) {
        printf("{\"error\":\"init %d\"}\n", (int)r);
        return 1;
    }
    if (*sms < 1)
        *sms = 1;
    static int dummy; /* fakegpu accepts any non-NULL function handle */
    *fn = (CUfunction)(void *)&dummy;
    if (o->spin) {
        CUmodule mod;
        if ((r = x->load(&mod, spin_ptx)) || (r = x->getfn(fn, mod, "fakegpu_spin"))) {
            printf("{\"error\":\"spin kernel %d\"}\n", (int)r);
            return 1;
        }
    }
    if (o->a_legacy && (r = x->shape(*fn, 1, 1, 1))) {
        printf("{\"error\":\"cuFuncSetBlockShape %d\"}\n", (int)r);
        return 1;
    }
    return o->is_graph && make_graph(x, *fn, *sms, gx, graph_ns) != CUDA_SUCCESS;
}

/* One launch of b blocks, through the API asked for. */
static CUresult launch_one(const struct opts *o, const struct api *x, CUfunction fn, CUgraphExec gx, unsigned b,
                           void **pp)
{
    if (o->is_graph)
        return x->glaunch(gx, NULL);
    if (o->a_ex) {
        CUlaunchConfig cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDimX = b, cfg.gridDimY = 1, cfg.gridDimZ = 1;
        cfg.blockDimX = 1, cfg.blockDimY = 1, cfg.blockDimZ = 1;
        return x->launch_ex(&cfg, fn, pp, NULL);
    }
    if (o->a_coop)
        return x->launch_coop(fn, b, 1, 1, 1, 1, 1, 0, NULL, pp);
    if (o->a_multi) {
        CUDA_LAUNCH_PARAMS lp = {fn, b, 1, 1, 1, 1, 1, 0, NULL, pp};
        return x->launch_multi(&lp, 1, 0);
    }
    if (o->a_legacy)
        return x->launch_grid(fn, (int)b, 1);
    return x->launch(fn, b, 1, 1, 1, 1, 1, 0, NULL, pp, NULL);
}

int main(int argc, char **argv)
{
    struct opts o;
    struct api x;
    if (parse(argc, argv, &o) != 0)
        return 2;
    const char *ns = getenv("FAKEGPU_LAUNCH_NS");
    double launch_ns = ns ? atof(ns) : 0;
    const char *err = load_api(&o, &x);
    if (err) {
        printf("{\"error\":\"%s\"}\n", err);
        return 1;
    }
    int sms = 1;
    CUfunction fn;
    CUgraphExec gx = NULL;
    double graph_ns = 0;
    if (setup(&o, &x, &sms, &fn, &gx, &graph_ns) != 0)
        return 1;
    static double win[MAX_WINDOWS], waits[MAX_WINDOWS];
    int nwin = 0;
    double wait0 = cpu_wait_ns();
    unsigned long long n = 0, k = 0;
    double work_ns = 0, win_ns = 0;
    double t0 = now_s(), end = t0 + o.seconds, wstart = t0;
    CUresult r = CUDA_SUCCESS, sr = CUDA_SUCCESS;
    uint32_t lcg = 12345;
    while (r == CUDA_SUCCESS && sr == CUDA_SUCCESS && now_s() < end) {
        unsigned b = o.blocks;
        unsigned long long kns = (unsigned long long)o.kernel_us * 1000;
        if (o.is_mix) {
            /* A step of MIX_STEP launches, then the same again: every second holds the same mix.
             * An endless random order made each second's mix differ by +-5 % in GPU time per
             * launch unit, which the fallback's one-second calibration took as the GPU's speed
             * (docs/hamicore.md, "Work, not only time"). */
            if (n % MIX_STEP == 0)
                lcg = 12345;
            lcg = lcg * 1103515245u + 12345u;
            unsigned m = (lcg >> 16) % NMIX;
            b = mix_blocks(m, sms);
            kns = (unsigned long long)mix[m].us * 1000;
        }
        double nominal = o.spin ? (double)kns * (double)((b + (unsigned)sms - 1) / (unsigned)sms) : launch_ns;
        void *params[] = {&kns};
        if (o.is_graph)
            nominal = graph_ns;
        if ((r = launch_one(&o, &x, fn, gx, b, o.spin ? params : NULL)) != CUDA_SUCCESS)
            break;
        n++, k++;
        if (o.die_after > 0 && now_s() - t0 >= o.die_after)
            kill(getpid(), SIGKILL);
        if (o.is_burst && k % o.burst == 0 && (sr = x.sync()) != CUDA_SUCCESS)
            break;
        work_ns += nominal, win_ns += nominal;
        double t = now_s();
        if (t - wstart >= o.window) {
            double w = cpu_wait_ns();
            if (nwin < MAX_WINDOWS)
                waits[nwin] = (w - wait0) / 1e9 / (t - wstart), win[nwin++] = win_ns / 1e9 / (t - wstart);
            win_ns = 0, wstart = t, wait0 = w;
        }
    }
    if (sr == CUDA_SUCCESS)
        sr = x.sync();
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
    return r == CUDA_SUCCESS && sr == CUDA_SUCCESS ? 0 : 1;
}
