/* The compute limit's pure parts, fed scripted readings and clocks: the queue bound's markers, the
 * report's join arithmetic, the scheduler files as the library maps them, and the fallback
 * controller's control law (its NVML readings and clocks scripted through struct lb_sensors). */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "controller.h"
#include "limitbed/sched.h"
#include "markers.h"
#include "region.h"
#include "schedclient.h"
#include "unit.h"

#define MS 1000000LL

/* ---- markers ---- */

static void test_markers_first_batch_alone(void)
{
    struct lb_markers m;
    lb_mk_reset(&m);
    CHECK_U64(m.batch, 1);
    CHECK(lb_mk_room(&m, 8 * MS));
    lb_mk_push(&m, (void *)1, 0, 1);
    /* unmeasured: one batch in flight, whatever the bound */
    CHECK(!lb_mk_room(&m, 1000 * MS));
}

/* n completions of one launch each, 10 µs apart: the cost is 10 µs, and the batch may double
 * after each. */
static void measure_10us(struct lb_markers *m, int n)
{
    for (int i = 0; i < n; i++) {
        int64_t t = m->last_done;
        void *ev = lb_mk_spare(m); /* as the gate does: the completed marker's event again */
        lb_mk_push(m, ev ? ev : (void *)1, t, 1);
        lb_mk_done(m, t + 10000);
        CHECK(lb_mk_room(m, 40 * MS));
    }
}

static void test_markers_size_batches_to_the_bound(void)
{
    struct lb_markers m;
    lb_mk_reset(&m);
    measure_10us(&m, 12); /* batches double up to ... */
    CHECK_U64(m.batch, 10 * MS / 10000); /* ... a quarter of the bound */
    CHECK(lb_mk_room(&m, 2 * MS));
    CHECK_U64(m.batch, LB_MK_BATCH_NS / 10000); /* at least a millisecond */
    CHECK(lb_mk_room(&m, 4 * MS));
    CHECK_U64(m.batch, LB_MK_BATCH_NS / 10000);
    CHECK_U64(m.nspare, 1);
    CHECK(lb_mk_spare(&m) == (void *)1);
    /* 100 launches per batch of 10 µs each: the bound of 4 ms holds four such batches (the
     * queued ones and the next) and refuses a fifth */
    for (int i = 0; i < 3; i++)
        lb_mk_push(&m, (void *)2, m.last_done + 20000 + i, m.batch);
    CHECK(lb_mk_room(&m, 4 * MS));
    lb_mk_push(&m, (void *)2, m.last_done + 30000, m.batch);
    CHECK(!lb_mk_room(&m, 4 * MS));
    CHECK(lb_mk_room(&m, 8 * MS));
}

static void test_markers_batches_grow_at_most_twice_per_completion(void)
{
    /* A shape mix: the first measured launch may be a 40 µs one among 2 ms ones. A batch sized
     * at once to that (a quarter of 40 ms / 40 µs = 250 launches) would queue half a second of
     * the real mix; a batch grows at most twice per completion, however many batches the
     * launcher makes meanwhile, so the next measurements correct it. */
    struct lb_markers m;
    lb_mk_reset(&m);
    lb_mk_push(&m, (void *)1, 0, 1);
    lb_mk_done(&m, 40000);
    for (int i = 0; i < 5; i++) {
        CHECK(lb_mk_room(&m, 40 * MS));
        CHECK_U64(m.batch, 2);
    }
    lb_mk_push(&m, (void *)1, 50000, 2);
    lb_mk_done(&m, 130000);
    CHECK(lb_mk_room(&m, 40 * MS));
    CHECK_U64(m.batch, 4);
    m.per_launch = 5 * MS; /* the mix's real cost shows: down at once */
    CHECK(lb_mk_room(&m, 40 * MS));
    CHECK_U64(m.batch, 2);
}

static void test_markers_pending_marker_lifts_the_cost(void)
{
    /* A launcher the CPU did not run between its 2 ms kernel and the marker's record measured 2 µs
     * a launch (a loaded node). The markers after it, seen still pending, show what their launches
     * have taken at least: the cost rises at once and the queue closes, long before the queued
     * work completes. */
    struct lb_markers m;
    lb_mk_reset(&m);
    lb_mk_push(&m, (void *)1, 2 * MS, 1);
    lb_mk_done(&m, 2 * MS + 2000);
    CHECK(m.per_launch < 3000);
    CHECK(lb_mk_room(&m, 30 * MS));
    lb_mk_push(&m, (void *)2, 3 * MS, 2);
    CHECK(lb_mk_room(&m, 30 * MS)); /* 2 µs a launch: room for more */
    lb_mk_pending(&m, 3 * MS + 1000); /* recorded 1 ms ago: not yet telling */
    CHECK(m.per_launch < 600000);
    lb_mk_pending(&m, 9 * MS); /* two launches, 6 ms and not done: 3 ms each at least */
    CHECK(m.per_launch > 2.9 * MS && m.per_launch < 3.1 * MS);
    CHECK(!lb_mk_room(&m, 6 * MS));
    /* a pending marker never lowers the cost; an empty one teaches nothing */
    lb_mk_pending(&m, 9 * MS + 1);
    CHECK(m.per_launch > 2.9 * MS);
    struct lb_markers e;
    lb_mk_reset(&e);
    lb_mk_push(&e, (void *)1, 0, 0);
    lb_mk_pending(&e, 50 * MS);
    CHECK(e.per_launch == 0);
    CHECK(e.per_launch == 0);
    /* unmeasured: a pending marker does not make it measured (one batch in flight holds) */
    lb_mk_reset(&e);
    lb_mk_push(&e, (void *)1, 0, 1);
    lb_mk_pending(&e, 10 * MS);
    CHECK(e.per_launch == 0);
    CHECK(!lb_mk_room(&e, 50 * MS));
    lb_mk_reset(&e);
    lb_mk_pending(&e, 60 * MS); /* nothing in flight */
    CHECK(e.per_launch == 0);
}

static void test_markers_long_kernels_one_at_a_time(void)
{
    struct lb_markers m;
    lb_mk_reset(&m);
    lb_mk_push(&m, (void *)1, 0, 1);
    lb_mk_done(&m, 1000 * MS); /* a 1 s kernel */
    CHECK_U64(m.batch, 1);
    CHECK(lb_mk_room(&m, 16 * MS)); /* none queued: it may go */
    lb_mk_push(&m, (void *)1, 1000 * MS, 1);
    CHECK(!lb_mk_room(&m, 16 * MS)); /* the next waits for it */
}

static void test_markers_empty_marker_teaches_nothing(void)
{
    /* A graph's marker is recorded before its launch: the first marks an empty queue and
     * completes at once; it must not make a launch look free (batches of thousands of graphs). */
    struct lb_markers m;
    lb_mk_reset(&m);
    lb_mk_push(&m, (void *)1, 0, 0);
    lb_mk_done(&m, 50000);
    CHECK(m.per_launch == 0);
    CHECK(lb_mk_room(&m, 40 * MS));
    CHECK_U64(m.batch, 1);
    lb_mk_push(&m, (void *)1, 60000, 1); /* covers the first graph: 7 ms */
    CHECK(!lb_mk_room(&m, 40 * MS));
    lb_mk_done(&m, 60000 + 7 * MS);
    CHECK(m.per_launch > 6.9 * MS && m.per_launch < 7.1 * MS);
    CHECK(lb_mk_room(&m, 40 * MS));
    CHECK_U64(m.batch, 1); /* a quarter of 40 ms is one graph */
}

static void test_markers_measure_from_the_previous_completion(void)
{
    struct lb_markers m;
    lb_mk_reset(&m);
    lb_mk_push(&m, (void *)1, 0, 1);
    lb_mk_push(&m, (void *)2, 1, 1); /* queued behind the first */
    lb_mk_done(&m, 2 * MS);
    lb_mk_done(&m, 4 * MS); /* ran 2 ms after the first finished, not 4 ms after it was recorded */
    CHECK(m.per_launch > 1.9 * MS && m.per_launch < 2.1 * MS);
    CHECK_U64(m.count, 0);
    CHECK_U64(m.nspare, 2);
}

static void test_markers_bound_follows_the_slice(void)
{
    CHECK_U64(lb_mk_bound(0, 0), LB_MK_QUEUE_OPEN_NS);          /* no planned end */
    CHECK_U64(lb_mk_bound(0, 500 * MS), LB_MK_QUEUE_OPEN_NS);
    CHECK_U64(lb_mk_bound(1000000, 0), LB_MK_QUEUE_MAX_NS);     /* a second: capped */
    CHECK_U64(lb_mk_bound(20000, 0), 20 * MS);                  /* what is left of 20 ms ... */
    CHECK_U64(lb_mk_bound(20000, 5 * MS), 15 * MS);
    CHECK_U64(lb_mk_bound(20000, 18 * MS), LB_MK_QUEUE_MIN_NS); /* ... never under the floor */
    CHECK_U64(lb_mk_bound(20000, 30 * MS), LB_MK_QUEUE_MIN_NS); /* past its planned end */
    CHECK_U64(lb_mk_bound(2000, 0), LB_MK_QUEUE_MIN_NS);        /* 2 ms: the floor */
}

/* ---- the report's join word ---- */

static uint64_t jw(uint32_t g, uint32_t joins, uint32_t drains) { return (uint64_t)g << 32 | (uint64_t)joins << 16 | drains; }

static void test_join_arithmetic(void)
{
    CHECK_U64(lb_join_add(0, 7), jw(7, 1, 0));
    CHECK_U64(lb_join_add(jw(7, 1, 0), 7), jw(7, 2, 0));
    CHECK_U64(lb_join_add(jw(6, 3, 1), 7), jw(7, 1, 0)); /* a new slice starts afresh */
    CHECK_U64(lb_join_add(jw(7, 0xffff, 0), 7), jw(7, 0xffff, 0)); /* saturates */
    CHECK_U64(lb_join_drain(jw(7, 2, 0), 7), jw(7, 2, 1));
    CHECK_U64(lb_join_drain(jw(7, 2, 2), 7), jw(7, 2, 2)); /* never more drains than joins */
    CHECK_U64(lb_join_drain(jw(8, 1, 0), 7), jw(8, 1, 0)); /* another slice's: unchanged */
}

/* ---- the files ---- */

static void grant_file(const char *path, uint32_t ngpus)
{
    static struct lb_sched_grant g;
    static unsigned char page[LB_SCHED_FILE_SIZE];
    memset(&g, 0, sizeof g);
    g.magic = LB_SCHED_GRANT_MAGIC, g.version = LB_SCHED_VERSION, g.ngpus = ngpus;
    for (uint32_t i = 0; i < ngpus && i < LB_SCHED_MAX_GPUS; i++)
        g.gpu[i].uuid[0] = (uint8_t)(i + 1), g.gpu[i].uuid[15] = 0x50;
    memset(page, 0, sizeof page);
    memcpy(page, &g, sizeof g);
    unit_write_file(path, page, sizeof page);
}

static void paths(char *grant, char *report, size_t n, const char *name)
{
    snprintf(grant, n, "%s/%s.grant", unit_tmp_dir, name);
    snprintf(report, n, "%s/%s.report", unit_tmp_dir, name);
    unlink(grant), unlink(report);
}

static void test_attach_maps_grant_and_makes_report(void)
{
    char g[512], r[512];
    paths(g, r, sizeof g, "attach");
    grant_file(g, 2);
    CHECK(lb_sched_attach(g, r) == 1);
    CHECK(lb_grant && lb_report);
    uint8_t u[16] = {2};
    u[15] = 0x50;
    CHECK(lb_sched_entry(u) == 1);
    u[0] = 3;
    CHECK(lb_sched_entry(u) == -1);
    uint8_t zero[16] = {0};
    CHECK(lb_sched_entry(zero) == -1);
    struct stat st;
    CHECK(stat(r, &st) == 0 && st.st_size == LB_SCHED_FILE_SIZE && (st.st_mode & 0777) == 0666);
    CHECK_U64(lb_report->magic, LB_SCHED_REPORT_MAGIC);
    lb_sched_join(1, 9);
    lb_sched_join(1, 9);
    lb_sched_drained(1, 9);
    lb_sched_want(1);
    lb_sched_active(1, 77);
    CHECK_U64(lb_report->gpu[1].join, jw(9, 2, 1));
    CHECK_U64(lb_report->gpu[1].want, 1);
    CHECK_U64(lb_report->gpu[1].active, 77);
    CHECK_U64(lb_report->gpu[1].bell, 3); /* each join and drain rings */
    CHECK_U64(lb_report->gpu[0].join, 0);
    lb_sched_detach();
}

/* No grant file, or one that is not: no scheduler (the library paces alone). */
static void test_attach_refuses_what_is_not_a_grant(void)
{
    char g[512], r[512];
    paths(g, r, sizeof g, "refuse");
    CHECK(lb_sched_attach(g, r) == 0); /* absent */
    unit_write_file(g, "short", 5);
    CHECK(lb_sched_attach(g, r) == 0);
    grant_file(g, 0);
    CHECK(lb_sched_attach(g, r) == 0); /* no GPU */
    grant_file(g, LB_SCHED_MAX_GPUS + 1);
    CHECK(lb_sched_attach(g, r) == 0);
    unlink(g);
    CHECK(symlink("/etc/hostname", g) == 0);
    CHECK(lb_sched_attach(g, r) == 0); /* not followed */
    CHECK(!lb_grant && !lb_report);
}

/* A report the container's processes left in another shape is made a report again; one that
 * cannot be made (a symlink planted in its place) leaves the grant in charge: launches follow it,
 * nothing is reported (the node reads the container as always busy), never pacing alone beside
 * the node's slices. */
static void test_attach_repairs_or_refuses_the_report(void)
{
    char g[512], r[512];
    paths(g, r, sizeof g, "report");
    grant_file(g, 1);
    unit_write_file(r, "junk", 4);
    CHECK(lb_sched_attach(g, r) == 1);
    struct stat st;
    CHECK(stat(r, &st) == 0 && st.st_size == LB_SCHED_FILE_SIZE);
    CHECK_U64(lb_report->magic, LB_SCHED_REPORT_MAGIC);
    lb_sched_detach();
    unlink(r);
    CHECK(symlink("/tmp/elsewhere", r) == 0);
    CHECK(lb_sched_attach(g, r) == 1);
    CHECK(lb_grant && !lb_report);
    lb_sched_join(0, 5); /* nothing to write: no fault */
    lb_sched_want(0);
    lb_sched_active(0, 1);
    lb_sched_drained(0, 5);
    lb_sched_detach();
}

/* The kind of lock another process holds on the report's live byte of entry e: F_UNLCK if none. */
static short live_lock(const char *report, int e)
{
    int fd = open(report, O_RDONLY | O_CLOEXEC);
    struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = LB_SCHED_LIVE_BYTE(e), .l_len = 1};
    short t = fd >= 0 && fcntl(fd, F_OFD_GETLK, &q) == 0 ? q.l_type : -1;
    if (fd >= 0)
        close(fd);
    return t;
}

/* A joined process holds its entry's live lock until its drain; a forked child's join is its own
 * (its exit drops its lock, not the parent's), and a process that dies joined leaves no lock. */
static void test_joined_processes_hold_a_live_lock(void)
{
    char g[512], r[512];
    paths(g, r, sizeof g, "live");
    grant_file(g, 2);
    CHECK(lb_sched_attach(g, r) == 1);
    CHECK(lb_report->features & LB_REPORT_F_LIVE);
    CHECK(live_lock(r, 1) == F_UNLCK);
    lb_sched_join(1, 4);
    CHECK(live_lock(r, 1) == F_RDLCK);
    CHECK(live_lock(r, 0) == F_UNLCK);
    pid_t c = fork();
    if (c == 0) {
        lb_sched_join(1, 4);
        lb_sched_drained(1, 4); /* the child's own lock: the parent's stays */
        _exit(live_lock(r, 1) == F_RDLCK ? 0 : 1);
    }
    int st = -1;
    waitpid(c, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(live_lock(r, 1) == F_RDLCK);
    lb_sched_drained(1, 4);
    CHECK(live_lock(r, 1) == F_UNLCK);
    c = fork();
    if (c == 0) {
        lb_sched_join(1, 5);
        _exit(0); /* dies joined: the kernel drops its lock */
    }
    waitpid(c, &st, 0);
    CHECK_U64(lb_report->gpu[1].join, jw(5, 1, 0));
    CHECK(live_lock(r, 1) == F_UNLCK);
    lb_sched_detach();
}

/* ---- the fallback controller, on scripted readings ---- */

static int64_t t_ns;
static double cost_pct; /* percent of the device per unit/s: the plant */
static int shared, off;

static int s_container_util(int d, uint64_t launched, int may_hold)
{
    (void)d, (void)may_hold;
    double u = (double)launched / LB_MILLI * cost_pct; /* launched: milli-units in the last second */
    return u > 100 ? 100 : (int)(u + 0.5);
}
static int s_device_util(int d) { return s_container_util(d, 0, 0); }
static unsigned s_sm_clock(int d) { (void)d; return 0; }
static int s_shared_now(int d) { (void)d; return shared; }
static int64_t s_now_ns(void) { return t_ns; }
static int64_t s_realtime_s(void) { return 1000000 + t_ns / 1000000000LL; }
static int s_switched_off(void) { return off; }

static const struct lb_sensors scripted = {s_container_util, s_device_util, s_sm_clock, s_shared_now, s_now_ns,
                                           s_realtime_s, s_switched_off};

static struct lb_region_header hdr;

/* One control step after 100 ms in which the process launched what its rate allowed. */
static void step(struct lb_bucket *b)
{
    t_ns += 100 * MS;
    atomic_fetch_add(&b->launched, (uint64_t)(atomic_load(&b->rate) / 10));
    atomic_store(&b->hungry, 1); /* it wanted more: a back-to-back launcher */
    lb_ctl_step(0, b, &scripted);
}

static int util_now(struct lb_bucket *b)
{
    uint64_t sum = 0;
    for (int i = 0; i < LB_CTL_WINDOW; i++)
        sum += b->ring[i];
    return s_container_util(0, sum, 0);
}

static void test_controller_converges_to_the_limit(void)
{
    lb_region = &hdr;
    for (double c = 0.01; c <= 1.0; c *= 10) { /* a unit costs 0.01 % .. 1 % of the device */
        struct lb_bucket b;
        memset(&b, 0, sizeof b);
        b.limit = 30, t_ns = 0, shared = 1, off = 0, cost_pct = c;
        atomic_store(&b.rate, LB_RATE_START);
        lb_ctl_episode(&b);
        for (int i = 0; i < 100; i++)
            step(&b);
        int u = util_now(&b);
        if (u < 28 || u > 32)
            unit_fail(__FILE__, __LINE__, "unit cost %.2f %%: utilisation %d %% after 10 s, want 30 ± 2", c, u);
    }
}

static void test_controller_follows_a_change_of_kernels(void)
{
    lb_region = &hdr;
    struct lb_bucket b;
    memset(&b, 0, sizeof b);
    b.limit = 50, t_ns = 0, shared = 1, off = 0, cost_pct = 0.05;
    atomic_store(&b.rate, LB_RATE_START);
    lb_ctl_episode(&b);
    for (int i = 0; i < 60; i++)
        step(&b);
    cost_pct = 0.2; /* kernels four times heavier */
    int worst = 0;
    for (int i = 0; i < 60; i++) {
        step(&b);
        if (i >= 20)
            worst = util_now(&b) > worst ? util_now(&b) : worst;
    }
    int u = util_now(&b);
    CHECK(u >= 47 && u <= 53);
    if (worst > 60)
        unit_fail(__FILE__, __LINE__, "after heavier kernels the utilisation reached %d %%, want back near 50 within 2 s", worst);
}

/* A rate seeded from the scheduler's slices (the gate's count, lb_limiter_seed) is kept for a
 * control window, whatever the window's readings (they mix the scheduler's second with the first
 * paced launches), and then followed from the readings as any rate. */
static void test_controller_keeps_a_seeded_rate_for_a_window(void)
{
    lb_region = &hdr;
    struct lb_bucket b;
    memset(&b, 0, sizeof b);
    b.limit = 50, t_ns = 0, shared = 1, off = 0, cost_pct = 0.05; /* 50 % at 1000 units/s */
    int64_t seed = 2000 * LB_MILLI; /* twice too much: held a window, then brought down */
    atomic_store(&b.rate, seed);
    atomic_store(&b.hold, LB_CTL_WINDOW);
    lb_ctl_episode(&b);
    for (int i = 0; i < LB_CTL_WINDOW; i++) {
        step(&b);
        CHECK(atomic_load(&b.rate) == seed);
    }
    CHECK_U64(atomic_load(&b.hold), 0);
    step(&b);
    CHECK(atomic_load(&b.rate) < seed);
    for (int i = 0; i < 40; i++)
        step(&b);
    int u = util_now(&b);
    CHECK(u >= 47 && u <= 53);
}

/* Alone and never calibrated: the first throttled launch calibrates; beside a neighbour, with the
 * `default` switch off, or once the node scheduler drove the device, it never does. */
static void test_controller_calibrates_only_when_it_may(void)
{
    lb_region = &hdr;
    struct {
        int shared, off, scheduled, want;
    } cases[] = {{0, 0, 0, 1}, {1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct lb_bucket b;
        memset(&b, 0, sizeof b);
        memset(&hdr, 0, sizeof hdr);
        lb_ctl_forget_calibration();
        b.limit = 30, t_ns = 1000 * MS, shared = cases[i].shared, off = cases[i].off, cost_pct = 0.1;
        atomic_store(&b.rate, LB_RATE_START);
        atomic_store(&b.scheduled, cases[i].scheduled);
        atomic_store(&b.calib_asked, 1);
        lb_ctl_episode(&b);
        step(&b);
        int calibrating = atomic_load(&b.calib_until) != 0;
        if (calibrating != cases[i].want)
            unit_fail(__FILE__, __LINE__, "case %zu (shared %d, switch off %d, scheduled %d): calibrating %d, want %d", i,
                      cases[i].shared, cases[i].off, cases[i].scheduled, calibrating, cases[i].want);
    }
}

const struct unit_test unit_sched_tests[] = {
    {"markers/first batch alone until measured", test_markers_first_batch_alone},
    {"markers/batches sized to a quarter of the bound, queue within it", test_markers_size_batches_to_the_bound},
    {"markers/a marker of no launches teaches nothing", test_markers_empty_marker_teaches_nothing},
    {"markers/batches grow at most twice per completion", test_markers_batches_grow_at_most_twice_per_completion},
    {"markers/a pending marker lifts the cost at once", test_markers_pending_marker_lifts_the_cost},
    {"markers/kernels longer than the bound go one at a time", test_markers_long_kernels_one_at_a_time},
    {"markers/a batch is timed from the previous completion", test_markers_measure_from_the_previous_completion},
    {"markers/the bound follows the slice", test_markers_bound_follows_the_slice},
    {"sched/join and drain arithmetic", test_join_arithmetic},
    {"sched/attach maps the grant and makes the report", test_attach_maps_grant_and_makes_report},
    {"sched/no grant file, or not one: no scheduler", test_attach_refuses_what_is_not_a_grant},
    {"sched/a junk report is repaired; without one the grant still rules", test_attach_repairs_or_refuses_the_report},
    {"sched/a joined process holds a live lock until its drain, its death drops it", test_joined_processes_hold_a_live_lock},
    {"controller/converges to the limit whatever a unit costs", test_controller_converges_to_the_limit},
    {"controller/follows a change of kernels", test_controller_follows_a_change_of_kernels},
    {"controller/keeps a rate seeded from the scheduler for a window", test_controller_keeps_a_seeded_rate_for_a_window},
    {"controller/calibrates only alone, switched on and unscheduled", test_controller_calibrates_only_when_it_may},
    {NULL, NULL},
};
