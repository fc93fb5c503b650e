/*
 * Compute limiter. A device with CUDA_DEVICE_SM_LIMIT = T (1..99 %) gets a token bucket; a launch
 * costs its grid's thread blocks (as upstream) and waits while the bucket is empty (the last
 * launch may overdraw it: progress for any grid size, the debt delays the next ones).
 *
 * The refill rate is learned, not configured: what a block costs in GPU time depends on the
 * kernel. A watcher thread (started by the first throttled launch, never when nothing is limited)
 * refills every 10 ms and every 100 ms compares two figures over the same trailing 1 s window:
 *   r  blocks this process launched per second on the device;
 *   U  the container's utilisation of the device in percent (NVML, samples of the container's
 *      processes; the whole device when they cannot be told apart).
 * U / r is the cost of a block, so T / (U / r) = r * T / U is the rate that would make U = T.
 * Every process of the container runs this loop against the same U, so their rates scale by the
 * same T / U and the container total converges to T. Rates go down at once and up by halves, at
 * most x4 per step; with no measurable U (nothing ran yet) the rate doubles.
 *
 * Policy (GPU_CORE_UTILIZATION_POLICY of this process, as upstream): "disable" never limits;
 * "force" always does; "default" limits while the region's util_switch is 1 (stamped 1; a monitor
 * may clear it when the GPU is not shared, as HAMi's does).
 */
#include "limiter.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "devmap.h"
#include "init.h"
#include "log.h"
#include "region.h"
#include "symbols.h"

#define TICK_NS 10000000LL  /* refill every 10 ms */
#define PERIOD_TICKS 10     /* control step every 100 ms */
#define WINDOW 10           /* periods in the 1 s window (NVML's sampling window on fakegpu, upstream's "now - 1 s") */
#define MILLI 1000LL        /* tokens are milli-blocks */
#define RATE_START (200 * MILLI)      /* blocks/s before anything was measured */
#define RATE_MIN (1 * MILLI)          /* never starve: at least a block a second */
#define RATE_MAX (1000000000LL * MILLI)
#define IDLE_PERIODS 50     /* the watcher exits after 5 s without a throttled launch */
#define MAX_SAMPLES 256

int lb_launch_limited;

struct bucket {
    _Atomic int64_t tokens;     /* milli-blocks; launches wait while <= 0 */
    _Atomic int64_t rate;       /* milli-blocks per second */
    _Atomic uint64_t launched;  /* blocks charged, ever */
    _Atomic int in_use;         /* a throttled launch happened: the watcher serves this device */
    uint32_t limit;             /* percent 1..99; 0 = not limited */
    /* watcher-only state */
    uint64_t seen;              /* `launched` at the previous control step */
    uint64_t ring[WINDOW];      /* blocks launched per period, last WINDOW periods */
    unsigned head;
};

static struct bucket g_b[LB_REGION_MAX_DEVICES];
static _Atomic int g_watcher; /* 0 none, 1 running (or starting) */

void lb_limiter_init(void)
{
    if (!lb_region || lb_cfg.policy == LB_POLICY_DISABLE)
        return;
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++) {
        uint32_t l = lb_region->sm_limit[d]; /* the region's: first writer wins, as for memory */
        if (l > 0 && l < 100) {
            g_b[d].limit = l;
            atomic_store(&g_b[d].rate, RATE_START);
            lb_launch_limited = 1;
        }
    }
}

void lb_limiter_after_fork(void)
{
    /* Threads do not survive fork: the child starts its own watcher on its first launch. */
    atomic_store(&g_watcher, 0);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void refill(struct bucket *b)
{
    int64_t rate = atomic_load(&b->rate);
    int64_t add = rate / (1000000000LL / TICK_NS);
    int64_t cap = 2 * add > MILLI ? 2 * add : MILLI; /* bursts of at most two ticks' worth */
    int64_t t = atomic_load(&b->tokens), n;
    do {
        n = t + add > cap ? (t > cap ? cap : t) : t + add;
        if (n == t)
            return;
    } while (!atomic_compare_exchange_weak(&b->tokens, &t, n));
}

/* The container's processes' pids as NVML reports them: the host pid when known, else the pid
 * (right when the container shares the host's PID namespace, and on fakegpu). */
static int container_pids(unsigned int *pids, int max)
{
    struct lb_region_slot *s = lb_region_slots(lb_region);
    uint32_t hwm = atomic_load(&lb_region->slot_hwm);
    int n = 0;
    for (uint32_t i = 0; i < hwm && i < LB_REGION_MAX_SLOTS && n < max; i++)
        if (atomic_load(&s[i].state) == LB_SLOT_ACTIVE)
            pids[n++] = (unsigned)(s[i].hostpid ? s[i].hostpid : s[i].pid);
    return n;
}

/* The container's utilisation of device d in percent over the last second; -1 if unknown. */
static int container_util(int d, uint64_t launched_in_window)
{
    static nvmlProcessUtilizationSample_t samples[MAX_SAMPLES]; /* watcher thread only */
    static unsigned int pids[LB_REGION_MAX_SLOTS];
    __typeof__(&nvmlDeviceGetHandleByIndex_v2) by_index = LB_REAL(nvmlDeviceGetHandleByIndex_v2);
    __typeof__(&nvmlDeviceGetProcessUtilization) per_proc = LB_REAL(nvmlDeviceGetProcessUtilization);
    __typeof__(&nvmlDeviceGetUtilizationRates) whole = LB_REAL(nvmlDeviceGetUtilizationRates);
    nvmlDevice_t h;
    if (!by_index || by_index((unsigned)lb_nvml_index(d), &h) != NVML_SUCCESS) /* d: a CUDA ordinal */
        return -1;
    int found = 0;
    unsigned sum = 0;
    if (per_proc) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long long since = ((unsigned long long)ts.tv_sec - 1) * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000;
        unsigned int n = MAX_SAMPLES;
        nvmlReturn_t r = per_proc(h, samples, &n, since);
        if (r == NVML_SUCCESS || r == NVML_ERROR_NOT_FOUND) {
            int np = container_pids(pids, LB_REGION_MAX_SLOTS);
            for (unsigned i = 0; r == NVML_SUCCESS && i < n && i < MAX_SAMPLES; i++)
                for (int k = 0; k < np; k++)
                    if (samples[i].pid == pids[k]) {
                        sum += samples[i].smUtil;
                        found = 1;
                        break;
                    }
            /* Work was launched but no sample is ours: the pids cannot be matched (a PID
             * namespace without host pids). Fall back to the whole device: never over the limit,
             * at worst under it when other tenants are busy. */
            if (found || launched_in_window == 0)
                return sum > 100 ? 100 : (int)sum;
        }
    }
    nvmlUtilization_t u;
    if (!whole || whole(h, &u) != NVML_SUCCESS)
        return -1;
    return (int)u.gpu;
}

static void control(int d, struct bucket *b)
{
    uint64_t launched = atomic_load(&b->launched);
    b->ring[b->head] = launched - b->seen;
    b->head = (b->head + 1) % WINDOW;
    b->seen = launched;
    uint64_t blocks = 0; /* in the 1 s window = blocks per second */
    for (int i = 0; i < WINDOW; i++)
        blocks += b->ring[i];
    int u = container_util(d, blocks);
    int64_t rate = atomic_load(&b->rate), next = rate;
    if (u < 0)
        return; /* no reading: keep the rate */
    if (u == 0 || blocks == 0) {
        if (blocks > 0)
            next = rate * 2; /* ran, but too little to show: find the scale quickly */
    } else {
        double target = (double)blocks * MILLI * b->limit / u;
        if (target < (double)rate)
            next = (int64_t)target;
        else
            next = (int64_t)(((double)rate + target) / 2 < (double)rate * 4 ? ((double)rate + target) / 2 : (double)rate * 4);
    }
    if (next < RATE_MIN)
        next = RATE_MIN;
    if (next > RATE_MAX)
        next = RATE_MAX;
    atomic_store(&b->rate, next);
}

static void *watcher(void *arg)
{
    (void)arg;
    lb_guard_enter(); /* any of our wrappers reached from here passes straight through */
    __typeof__(&nvmlInit_v2) init = LB_REAL(nvmlInit_v2);
    if (!init || init() != NVML_SUCCESS)
        LB_WARN("compute limit: NVML is not available; launches are paced at the learned rate only");
    int64_t next = now_ns();
    unsigned tick = 0, idle = 0;
    for (;;) {
        for (int d = 0; d < LB_REGION_MAX_DEVICES; d++)
            if (g_b[d].limit && atomic_load(&g_b[d].in_use))
                refill(&g_b[d]);
        if (++tick % PERIOD_TICKS == 0) {
            int busy = 0;
            for (int d = 0; d < LB_REGION_MAX_DEVICES; d++) {
                struct bucket *b = &g_b[d];
                if (!b->limit || !atomic_load(&b->in_use))
                    continue;
                busy |= atomic_load(&b->launched) != b->seen;
                control(d, b);
            }
            idle = busy ? 0 : idle + 1;
            if (idle >= IDLE_PERIODS) {
                /* Nobody launches: leave (a launch starts a new one). A launcher that saw us
                 * running re-checks while it waits, so none is left without refills. */
                atomic_store(&g_watcher, 0);
                return NULL;
            }
        }
        next += TICK_NS;
        struct timespec ts = {(time_t)(next / 1000000000LL), (long)(next % 1000000000LL)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
    }
}

/* 1 if a watcher runs (or another thread is starting one), 0 if none can be started. */
static int ensure_watcher(void)
{
    int zero = 0;
    if (atomic_load_explicit(&g_watcher, memory_order_relaxed) || !atomic_compare_exchange_strong(&g_watcher, &zero, 1))
        return 1;
    /* The application's signals must never be delivered to our thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 256 * 1024);
    pthread_t t;
    int r = pthread_create(&t, &a, watcher, NULL);
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        atomic_store(&g_watcher, 0);
        LB_ERROR("compute limit: cannot start the watcher thread (error %d); launches are not limited", r);
        return 0;
    }
    return 1;
}

void lb_limiter_take(int dev, uint64_t blocks)
{
    struct bucket *b = &g_b[dev];
    if (!b->limit || (lb_cfg.policy == LB_POLICY_DEFAULT && !atomic_load(&lb_region->util_switch)))
        return;
    if (!atomic_load_explicit(&b->in_use, memory_order_relaxed))
        atomic_store(&b->in_use, 1);
    while (atomic_load(&b->tokens) <= 0) {
        /* Re-checked while waiting: the watcher may have left idle just before we came. */
        if (!ensure_watcher())
            return; /* no refills will come: not limited rather than blocked forever */
        struct timespec ts = {0, 1000000}; /* 1 ms: a tenth of a refill tick */
        nanosleep(&ts, NULL);
    }
    ensure_watcher();
    int64_t cost = blocks > (uint64_t)(RATE_MAX / MILLI) ? RATE_MAX : (int64_t)blocks * MILLI;
    atomic_fetch_sub(&b->tokens, cost);
    atomic_fetch_add(&b->launched, blocks);
}
