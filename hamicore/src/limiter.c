/*
 * The fallback pacing of kernel launches (docs/hamicore.md, "Without the scheduler"): one bucket
 * per limited device that launches draw from and wait on, refilled every 10 ms at the rate the
 * controller (controller.c) sets every 100 ms from the sensors (sensors.c), by a watcher thread.
 * The launch that empties a bucket may overdraw it (any kernel makes progress; the debt delays
 * the next ones). A launch also waits for the device's GPU-time ledger (pacetime.h, ledger.h):
 * each launch is charged the GPU time its event measured, which a rate of launches cannot hold
 * for kernels longer than NVML's window. Used only where no node scheduler drives the device
 * (gate.c).
 */
#include "limiter.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "controller.h"
#include "devmap.h"
#include "guard.h"
#include "init.h"
#include "log.h"
#include "pacetime.h"
#include "region.h"
#include "schedclient.h"
#include "symbols.h"

#define IDLE_PERIODS 50 /* the watcher exits after 5 s without a throttled launch */

int lb_launch_limited;

/* By CUDA ordinal: launches and the driver name devices so. The limits are the region's, by
 * physical GPU (devmap.h), and are resolved into the buckets at the first gated launch
 * (lb_limiter_resolve), when the driver can tell which GPU an ordinal is. */
static struct lb_bucket g_b[LB_REGION_MAX_DEVICES];
static _Atomic int g_watcher; /* 0 none, 1 running (or starting) */
static pthread_mutex_t g_resolve_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_resolved;

static int limited(uint32_t l) { return l > 0 && l < 100; }

void lb_limiter_init(void)
{
    lb_pace_reset();
    for (int d = 0; lb_region && lb_cfg.policy != LB_POLICY_DISABLE && d < LB_REGION_MAX_DEVICES; d++)
        if (limited(lb_region->sm_limit[d])) /* the region's: first writer wins, as for memory */
            lb_launch_limited = 1;
}

/* The strictest compute limit of the region: what an ordinal whose GPU cannot be told gets. */
static uint32_t strictest(void)
{
    uint32_t s = 100;
    for (int p = 0; p < LB_REGION_MAX_DEVICES; p++)
        if (limited(lb_region->sm_limit[p]) && lb_region->sm_limit[p] < s)
            s = lb_region->sm_limit[p];
    return s;
}

/* Each ordinal's bucket gets its physical GPU's limit: a process that renumbers its GPUs
 * (CUDA_VISIBLE_DEVICES=1,0) must not swap their limits. */
static void resolve_limits(void)
{
    __typeof__(&cuDeviceGetCount) count = LB_REAL(cuDeviceGetCount);
    int n = LB_REGION_MAX_DEVICES;
    lb_guard_enter();
    if (!count || count(&n) != CUDA_SUCCESS || n > LB_REGION_MAX_DEVICES)
        n = LB_REGION_MAX_DEVICES; /* every ordinal that may exist is resolved */
    lb_guard_leave();
    for (int ord = 0; ord < n; ord++) {
        int p = lb_phys_index(ord);
        uint32_t l = p >= 0 && p < LB_REGION_MAX_DEVICES ? lb_region->sm_limit[p] : strictest();
        if (p < 0 && limited(l))
            LB_ERROR("compute limit: CUDA device %d: its physical GPU cannot be told: held to the strictest limit, %u %%", ord, l);
        if (limited(l)) {
            g_b[ord].limit = l;
            atomic_store(&g_b[ord].rate, LB_RATE_START);
            atomic_store(&g_b[ord].share_ppm, l * 10000);
        }
    }
}

void lb_limiter_resolve(void)
{
    if (!lb_launch_limited || atomic_load_explicit(&g_resolved, memory_order_acquire))
        return;
    pthread_mutex_lock(&g_resolve_mu);
    if (!atomic_load_explicit(&g_resolved, memory_order_relaxed)) {
        resolve_limits();
        atomic_store_explicit(&g_resolved, 1, memory_order_release);
    }
    pthread_mutex_unlock(&g_resolve_mu);
}

int lb_limiter_limited(int dev) { return g_b[dev].limit != 0; }

uint32_t lb_limiter_limit(int dev) { return g_b[dev].limit; }

int lb_limiter_calibrating(int dev)
{
    int64_t calib = atomic_load_explicit(&g_b[dev].calib_until, memory_order_relaxed);
    return calib && lb_nvml_sensors.now_ns() < calib + LB_CALIB_SLACK_NS;
}

void lb_limiter_scheduled(int dev) { atomic_store(&g_b[dev].scheduled, 1); }

void lb_limiter_after_fork(void)
{
    /* Threads do not survive fork: the child starts its own watcher on its first launch. Its
     * kernels may not be the parent's: it takes the work factor from the region, not F. */
    atomic_store(&g_watcher, 0);
    pthread_mutex_init(&g_resolve_mu, NULL); /* a parent's thread may have held it */
    lb_ctl_forget_calibration();
    lb_pace_reset(); /* the parent's events are not the child's */
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++) {
        lb_ctl_after_fork(&g_b[d]);
        g_b[d].sch_units = 0, g_b[d].sch_from = 0, g_b[d].sch_rate = 0; /* the parent's launches */
        atomic_store(&g_b[d].hold, 0);
    }
}

static void refill(struct lb_bucket *b)
{
    int64_t rate = atomic_load(&b->rate);
    int64_t add = rate / (1000000000LL / LB_CTL_TICK_NS);
    int64_t cap = 2 * add > LB_MILLI ? 2 * add : LB_MILLI; /* bursts of at most two ticks' worth */
    int64_t t = atomic_load(&b->tokens), n;
    do {
        n = t + add > cap ? (t > cap ? cap : t) : t + add;
        if (n == t)
            return;
    } while (!atomic_compare_exchange_weak(&b->tokens, &t, n));
}

/* Every tick: refill the buckets, and look at the launches' events (a completion is charged within
 * a tick of it). 1 while some device has launches in flight or waiting for the ledger. */
static int look(int64_t now)
{
    int timing = 0;
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++) {
        struct lb_bucket *b = &g_b[d];
        if (!b->limit || !atomic_load(&b->in_use))
            continue;
        refill(b);
        int busy = 0, measured = 0;
        atomic_store(&b->launch_ns, lb_pace_poll(d, now, &busy, &measured));
        if (measured)
            atomic_store(&b->launch_measured, 1);
        timing |= busy;
    }
    return timing;
}

static void *watcher(void *arg)
{
    (void)arg;
    lb_guard_enter(); /* any of our wrappers reached from here passes straight through */
    __typeof__(&nvmlInit_v2) init = LB_REAL(nvmlInit_v2);
    if (!init || init() != NVML_SUCCESS)
        LB_WARN("compute limit: NVML is not available; launches are paced at the learned rate only");
    /* A new episode (first throttled launch, or the first after 5 idle seconds, or a fork
     * child): the learned rate stays, the measurements of the last one do not. */
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++)
        lb_ctl_episode(&g_b[d]);
    int64_t next = lb_nvml_sensors.now_ns();
    unsigned tick = 0, idle = 0;
    for (;;) {
        int timing = look(lb_nvml_sensors.now_ns());
        if (++tick % LB_CTL_PERIOD_TICKS == 0) {
            int busy = timing; /* launches in flight, or waiting for their GPU time to be earned */
            for (int d = 0; d < LB_REGION_MAX_DEVICES; d++) {
                struct lb_bucket *b = &g_b[d];
                if (!b->limit || !atomic_load(&b->in_use))
                    continue;
                busy |= atomic_load(&b->launched) != b->seen;
                lb_ctl_step(d, b, &lb_nvml_sensors);
            }
            idle = busy ? 0 : idle + 1;
            if (idle >= IDLE_PERIODS) {
                /* Nobody launches: leave (a launch starts a new one). A launcher that saw us
                 * running re-checks while it waits, so none is left without refills. */
                atomic_store(&g_watcher, 0);
                return NULL;
            }
        }
        next += LB_CTL_TICK_NS;
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

static uint32_t sm_count(int dev)
{
    __typeof__(&cuDeviceGetAttribute) attr = LB_REAL(cuDeviceGetAttribute);
    int v = 0;
    if (!attr || attr(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, (CUdevice)dev) != CUDA_SUCCESS || v <= 0)
        v = 1;
    return (uint32_t)v;
}

/* units = kernels + blocks / SMs, in milli-units, saturating */
static int64_t units_of(struct lb_bucket *b, int dev, uint64_t kernels, uint64_t blocks)
{
    uint32_t sm = atomic_load_explicit(&b->sm, memory_order_relaxed);
    if (!sm)
        atomic_store(&b->sm, sm = sm_count(dev));
    uint64_t cap = (uint64_t)(LB_RATE_MAX / LB_MILLI);
    uint64_t k = kernels < cap ? kernels : cap, w = blocks / sm < cap ? blocks / sm : cap;
    uint64_t frac = blocks / sm < cap ? (blocks % sm) * LB_MILLI / sm : 0;
    int64_t cost = (int64_t)((k + w) * LB_MILLI + frac);
    return cost > LB_RATE_MAX ? LB_RATE_MAX : cost;
}

void lb_limiter_count_scheduled(int dev, uint64_t launches, uint64_t kernels, uint64_t blocks, int64_t now)
{
    struct lb_bucket *b = &g_b[dev];
    if (!b->limit || !launches)
        return;
    if (!b->sch_from)
        b->sch_from = now;
    uint64_t add;
    if (__builtin_mul_overflow(launches, (uint64_t)units_of(b, dev, kernels, blocks), &add) ||
        __builtin_add_overflow(b->sch_units, add, &b->sch_units))
        b->sch_units = UINT64_MAX;
    if (now - b->sch_from >= 1000000000LL) {
        double r = (double)b->sch_units * 1e9 / (double)(now - b->sch_from);
        b->sch_rate = r > (double)LB_RATE_MAX ? LB_RATE_MAX : (int64_t)r;
        b->sch_units = 0, b->sch_from = now;
    }
}

void lb_limiter_seed(int dev)
{
    struct lb_bucket *b = &g_b[dev];
    if (!b->limit || b->sch_rate <= 0)
        return;
    if (b->sch_rate > atomic_load(&b->rate)) {
        atomic_store(&b->rate, b->sch_rate);
        atomic_store(&b->hold, LB_CTL_WINDOW);
    }
}

/* The device's GPU-time ledger (pacetime.h): a launch waits while the GPU time its predecessors
 * took (the one still running counts its time so far) is not yet earned back at the limit, or
 * while the work queued would take longer than the ledger's bound. */
static void wait_ledger(int dev, struct lb_bucket *b)
{
    if (lb_pace_may(dev, atomic_load(&b->share_ppm), lb_nvml_sensors.now_ns()))
        return;
    lb_pace_waiting(dev, 1); /* the watcher stays meanwhile */
    do {
        ensure_watcher(); /* the ledger needs no refills: without a watcher it still holds */
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    } while (!lb_nvml_sensors.switched_off() && !lb_pace_may(dev, atomic_load(&b->share_ppm), lb_nvml_sensors.now_ns()));
    lb_pace_waiting(dev, -1);
}

/* Once per device: the log says that this library alone paces it when there is no node scheduler
 * at all (the gate says so, and why, for a device of a grant file: gate.c). */
static void say_alone(int dev, struct lb_bucket *b)
{
    if (atomic_load_explicit(&b->said, memory_order_relaxed) || atomic_exchange(&b->said, 1) || lb_grant)
        return;
    LB_INFO("compute limit: device %d: no node scheduler: paced by this library alone (%u %%, %s)", dev, b->limit,
            lb_cfg.policy == LB_POLICY_FORCE ? "force" : "default");
}

void lb_limiter_take(int dev, uint64_t kernels, uint64_t blocks)
{
    struct lb_bucket *b = &g_b[dev];
    if (!b->limit)
        return;
    say_alone(dev, b);
    int idle = 0;
    if (!atomic_load_explicit(&b->in_use, memory_order_relaxed) && atomic_compare_exchange_strong(&b->in_use, &idle, 1))
        atomic_store(&b->calib_asked, 1);
    int64_t cost = units_of(b, dev, kernels, blocks);
    /* The watcher ends a calibration at the control step that measures it (its ring must not
     * hold throttled launches); the launches end it alone should the watcher not come. */
    int64_t calib = atomic_load_explicit(&b->calib_until, memory_order_relaxed);
    if (lb_nvml_sensors.switched_off() || (calib && lb_nvml_sensors.now_ns() < calib + LB_CALIB_SLACK_NS)) {
        /* Not limited, but measured: the watcher keeps pairing this work with U, so the moment
         * the switch comes on the rate is already the right one (and the work queued while
         * unthrottled is not mistaken for the cost of the first throttled launches). The same
         * during a calibration. */
        ensure_watcher();
        atomic_fetch_add(&b->launched, (uint64_t)cost);
        return;
    }
    while (atomic_load(&b->tokens) <= 0) {
        /* "Held back" for every control step this wait spans, not only the first: a launch
         * that overdrew the bucket may wait several steps. */
        atomic_store_explicit(&b->hungry, 1, memory_order_relaxed);
        /* Re-checked while waiting: the watcher may have left idle just before we came. */
        if (!ensure_watcher())
            return; /* no refills will come: not limited rather than blocked forever */
        struct timespec ts = {0, 1000000}; /* 1 ms: a tenth of a refill tick */
        nanosleep(&ts, NULL);
        if (lb_nvml_sensors.switched_off())
            break; /* the monitor let go meanwhile */
    }
    wait_ledger(dev, b);
    ensure_watcher();
    atomic_fetch_sub(&b->tokens, cost);
    atomic_fetch_add(&b->launched, (uint64_t)cost);
    lb_pace_taken(dev); /* its event follows it (lb_pace_launched) */
}

/* Once per monitor period per container (the monitor clears the word): also stamp the GPUs'
 * UUIDs, so the monitor knows which containers share a physical GPU. */
void lb_mark_launch_slow(void)
{
    static _Atomic int stamped; /* this process stamped the UUIDs it can see */
    struct lb_region_header *h = lb_region;
    if (!atomic_exchange(&stamped, 1)) {
        __typeof__(&cuDeviceGetCount) count = LB_REAL(cuDeviceGetCount);
        __typeof__(&cuDeviceGet) get = LB_REAL(cuDeviceGet);
        __typeof__(&cuDeviceGetUuid) uuid = LB_REAL(cuDeviceGetUuid);
        int n = 0;
        if (count && get && uuid && count(&n) == CUDA_SUCCESS) {
            for (int i = 0; i < n && i < LB_REGION_MAX_DEVICES; i++) {
                CUdevice d;
                CUuuid id;
                static const uint8_t zero[16];
                if (get(&d, i) != CUDA_SUCCESS || uuid(&id, d) != CUDA_SUCCESS)
                    continue;
                if (!memcmp(h->dev_uuid[i], zero, sizeof zero))
                    memcpy(h->dev_uuid[i], id.bytes, sizeof id.bytes);
            }
        }
    }
    atomic_store_explicit(&h->recent_kernel, 1, memory_order_relaxed);
}
