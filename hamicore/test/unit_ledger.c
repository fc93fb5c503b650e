/* The fallback pacing's GPU-time ledger (ledger.h) on scripted completions and clocks, and the
 * controller's calibration decision on the launch times the ledger measures. */
#include <stdatomic.h>

#include "controller.h"
#include "ledger.h"
#include "region.h"
#include "unit.h"

#define MS 1000000LL
#define PPM30 300000u

static void fresh(struct lb_ledger *l, uint32_t ppm)
{
    lb_lg_reset(l);
    l->share_ppm = ppm;
    lb_lg_credit(l, 1); /* the first credit: the cap */
}

/* One launch at `at` that the events show complete at `done` (nothing else in flight). */
static void run(struct lb_ledger *l, int64_t at, int64_t done)
{
    CHECK(lb_lg_push(l, (void *)1, 7, at));
    lb_lg_done(l, done);
}

/* When the first launch after t may go (1 ms polls, as a waiting launcher looks), -1 by limit. */
static int64_t next_go(struct lb_ledger *l, int64_t t, int64_t limit)
{
    for (; t < limit; t += MS) {
        lb_lg_credit(l, t);
        if (lb_lg_room(l, t))
            return t;
    }
    return -1;
}

static void test_ledger_charges_what_a_launch_took(void)
{
    CHECK_U64(lb_lg_charge(0), 0);
    CHECK_U64(lb_lg_charge(LB_LG_FREE_NS), 0);             /* a launch's first 50 ms: the NVML loop's */
    CHECK_U64(lb_lg_charge(75 * MS), 50 * MS);             /* a ramp ... */
    CHECK_U64(lb_lg_charge(LB_LG_WHOLE_NS), LB_LG_WHOLE_NS); /* ... to all of it at 100 ms */
    CHECK_U64(lb_lg_charge(1000 * MS), 1000 * MS);
}

/* At 30 %, a 1 s kernel is followed by 2.33 s of holding back, a 5 s kernel by 11.67 s: 0.30 of
 * every cycle from the second on (the first starts with the cap's 100 ms saved up). */
static void test_ledger_holds_long_kernels_to_the_share(void)
{
    const int64_t lens[] = {1000 * MS, 5000 * MS};
    for (size_t i = 0; i < 2; i++) {
        struct lb_ledger l;
        fresh(&l, PPM30);
        int64_t t = next_go(&l, 1, 100 * MS), start[4];
        for (int k = 0; k < 4; k++) {
            CHECK(t >= 0);
            start[k] = t;
            run(&l, t, t + lens[i]);
            t = next_go(&l, t + lens[i], t + 100 * lens[i]);
        }
        for (int k = 1; k < 3; k++) {
            double share = (double)lens[i] / (double)(start[k + 1] - start[k]);
            if (share < 0.299 || share > 0.301)
                unit_fail(__FILE__, __LINE__, "%lld ms kernels: cycle %d did %.4f of the GPU, want 0.30", (long long)(lens[i] / MS),
                          k, share);
        }
    }
}

/* A kernel still running counts its time so far: a 5 s kernel is not free while it runs, and
 * nothing is queued behind it before its time is known (one at a time until measured). */
static void test_ledger_running_kernel_counts(void)
{
    struct lb_ledger l;
    fresh(&l, PPM30);
    CHECK(lb_lg_room(&l, 1));
    CHECK(lb_lg_push(&l, (void *)1, 7, 1));
    CHECK(!lb_lg_room(&l, 2)); /* unmeasured: one at a time */
    lb_lg_credit(&l, 10 * MS);
    lb_lg_pending(&l, 10 * MS);
    CHECK(!lb_lg_room(&l, 10 * MS));
    CHECK_U64(lb_lg_running(&l, 10 * MS), 0); /* free so far ... */
    for (int64_t t = 200 * MS; t <= 4000 * MS; t += 100 * MS) {
        lb_lg_credit(&l, t);
        lb_lg_pending(&l, t);
        CHECK(lb_lg_running(&l, t) == t - 1); /* ... then all of its time */
        CHECK(!lb_lg_room(&l, t));
    }
    CHECK(lb_lg_launch_ns(&l, 4000 * MS) >= 3999 * MS); /* what the controller reads meanwhile */
    lb_lg_done(&l, 5000 * MS);
    CHECK(l.balance < -3390 * MS && l.balance > -3410 * MS); /* 0.1 + 1.5 - 5 s */
    /* Measured at 5 s: the next long kernel too goes alone. */
    int64_t t = next_go(&l, 5000 * MS, 30000 * MS);
    CHECK(t > 16000 * MS && t < 17000 * MS);
    CHECK(lb_lg_push(&l, (void *)1, 7, t));
    CHECK(!lb_lg_room(&l, t + MS));
}

/* Kernels of a few ms back to back cost the ledger nothing (the NVML loop paces them), and the
 * queue is bounded once they are measured. */
static void test_ledger_short_kernels_are_free(void)
{
    struct lb_ledger l;
    fresh(&l, PPM30);
    int64_t t = MS;
    for (int k = 0; k < 2000; k++, t += 2 * MS)
        run(&l, t, t + 2 * MS);
    CHECK_U64(l.balance, LB_LG_CAP_NS);
    CHECK(l.per_launch > 1.9 * MS && l.per_launch < 2.1 * MS);
    int queued = 0;
    while (lb_lg_room(&l, t) && queued < LB_LG_RING) {
        CHECK(lb_lg_push(&l, (void *)1, 7, t));
        queued++;
    }
    CHECK_U64(queued, 25); /* 25 x 2 ms: the 50 ms bound */
}

/* What no event can time is charged a second; events are spared per context. */
static void test_ledger_untimed_and_spares(void)
{
    struct lb_ledger l;
    fresh(&l, PPM30);
    lb_lg_untimed(&l, 2);
    CHECK(l.balance <= LB_LG_CAP_NS - LB_LG_UNTIMED_NS);
    CHECK(!lb_lg_room(&l, 2));
    CHECK(lb_lg_push(&l, (void *)11, 1, 3));
    CHECK(lb_lg_push(&l, (void *)22, 2, 3));
    lb_lg_done(&l, 4);
    lb_lg_done(&l, 5);
    CHECK(lb_lg_spare(&l, 3) == NULL);
    CHECK(lb_lg_spare(&l, 2) == (void *)22);
    CHECK(lb_lg_spare(&l, 1) == (void *)11);
    CHECK(lb_lg_spare(&l, 1) == NULL);
}

/* Idle time is credited up to the cap, whoever looks when: a kernel after a minute of nothing
 * owes its time less the cap and what it earned while it ran. */
static void test_ledger_idle_credit_is_capped(void)
{
    struct lb_ledger l;
    fresh(&l, PPM30);
    run(&l, 60000 * MS, 61000 * MS); /* nobody credited the minute before it */
    CHECK(l.balance == LB_LG_CAP_NS + 300 * MS - 1000 * MS);
}

/* ---- the controller: no calibration run for launches of a control step or more ---- */

static int64_t t_ns;
static int c_util(int d, uint64_t l, int h) { (void)d, (void)l, (void)h; return 30; }
static int c_device(int d) { (void)d; return 30; }
static unsigned c_clock(int d) { (void)d; return 0; }
static int c_shared(int d) { (void)d; return 0; }
static int64_t c_now(void) { return t_ns; }
static int64_t c_real(void) { return 1000000 + t_ns / 1000000000LL; }
static int c_off(void) { return 0; }
static const struct lb_sensors alone = {c_util, c_device, c_clock, c_shared, c_now, c_real, c_off};
static struct lb_region_header hdr;

/* The first throttled launch asked for a calibration; the ledger says how long launches take. */
static int calibrates(int64_t launch_ns, int measured, int steps)
{
    struct lb_bucket b = {0};
    memset(&hdr, 0, sizeof hdr);
    lb_region = &hdr;
    lb_ctl_forget_calibration();
    b.limit = 30, t_ns = 1000 * MS;
    atomic_store(&b.rate, LB_RATE_START);
    atomic_store(&b.calib_asked, 1);
    atomic_store(&b.launch_ns, launch_ns);
    atomic_store(&b.launch_measured, measured);
    lb_ctl_episode(&b);
    for (int i = 0; i < steps && !atomic_load(&b.calib_until); i++) {
        t_ns += 100 * MS;
        atomic_fetch_add(&b.launched, 10 * LB_MILLI);
        lb_ctl_step(0, &b, &alone);
    }
    return atomic_load(&b.calib_until) != 0;
}

static void test_controller_no_calibration_for_long_launches(void)
{
    CHECK(calibrates(2 * MS, 1, 1));                   /* short launches, measured: at once */
    CHECK(!calibrates(LB_CALIB_LONG_NS, 1, 20));       /* a launch of a control step: never */
    CHECK(!calibrates(LB_CALIB_LONG_NS, 0, 20));       /* ... nor one running that long */
    CHECK(!calibrates(0, 0, LB_CTL_WINDOW));           /* nothing known yet: it waits ... */
    CHECK(calibrates(0, 0, LB_CTL_WINDOW + 1));        /* ... a window at most */
}

const struct unit_test unit_ledger_tests[] = {
    {"ledger/a launch's first 50 ms are free, all of it charged from 100 ms", test_ledger_charges_what_a_launch_took},
    {"ledger/1 s and 5 s kernels held to 30 % of every cycle", test_ledger_holds_long_kernels_to_the_share},
    {"ledger/a kernel still running counts its time so far", test_ledger_running_kernel_counts},
    {"ledger/short kernels are free, their queue bounded", test_ledger_short_kernels_are_free},
    {"ledger/an untimed launch costs a second; events spared per context", test_ledger_untimed_and_spares},
    {"ledger/idle credit is capped whoever looks when", test_ledger_idle_credit_is_capped},
    {"controller/no calibration run for launches of a control step", test_controller_no_calibration_for_long_launches},
    {NULL, NULL},
};
