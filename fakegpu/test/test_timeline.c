/* The engines' timeline (timeline.c) and the work records (account.c) on a scripted clock: time
 * slices between processes' queues, preemption, queue bounds, the drain bound, a dead process's
 * work, and what each process and container is credited with. Other processes are forked
 * children that queue their kernels at a scripted time and stay alive until told to go. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "state.h"

#define MS 1000000ULL
#define S (1000 * MS)

static uint64_t now_ns;
static uint64_t scripted(void) { return now_ns; }

static void at(fg_state *st, uint64_t t) {
    now_ns = t;
    fg_state_lock(st);
}

static int open_state(fg_state *st, const char *name, const char *group) {
    char p[300], err[512];
    snprintf(p, sizeof p, "%s/%s", fg_test_dir(), name);
    if (fg_state_attach(st, p, 7, 2, err, sizeof err) != 0)
        goto bad;
    st->clock = scripted, now_ns = 0; /* the engine's lock must not run the timeline ahead of the test */
    if (fg_state_engine(st, 1 * MS, group, err, sizeof err) != 0)
        goto bad;
    return 0;
bad:
    fprintf(stderr, "%s\n", err);
    return -1;
}

/* A state whose engines have run up to t (nothing queued yet). */
static int open_at(fg_state *st, const char *name, const char *group, uint64_t t) {
    if (open_state(st, name, group) != 0)
        return -1;
    at(st, t);
    fg_state_unlock(st);
    return 0;
}

typedef struct child {
    pid_t pid;
    int hold; /* closing it lets the child exit */
} child;

/* A process of `group` that queues n kernels of ns each (nominal = run) on unit 0 at time t. */
static child spawn(const char *name, const char *group, uint64_t t, int n, uint64_t ns) {
    int ready[2], hold[2];
    child c = {-1, -1};
    if (pipe(ready) || pipe(hold))
        return c;
    c.pid = fork();
    if (c.pid == 0) {
        fg_state st;
        close(hold[1]);
        int ok = open_state(&st, name, group) == 0;
        at(&st, t);
        for (int i = 0; ok && i < n; i++)
            ok = fg_state_submit(&st, 0, ns, ns) == 0;
        fg_state_unlock(&st);
        if (write(ready[1], ok ? "y" : "n", 1) != 1)
            _exit(2);
        char b;
        while (read(hold[0], &b, 1) > 0)
            ;
        _exit(0);
    }
    close(hold[0]), close(ready[1]);
    char r = 0;
    if (read(ready[0], &r, 1) != 1 || r != 'y')
        c.pid = -1;
    close(ready[0]);
    c.hold = hold[1];
    return c;
}

static void reap_child(child c, int kill_it) {
    if (kill_it)
        kill(c.pid, SIGKILL);
    close(c.hold);
    waitpid(c.pid, NULL, 0);
}

static const fg_acct *record_of(const fg_state *st, pid_t pid) {
    for (int i = 0; i < FG_MAX_ACCTS; i++)
        if (st->sh->acct[i].used && st->sh->acct[i].pid == (int32_t)pid)
            return &st->sh->acct[i];
    return NULL;
}

static const fg_group *group_named(const fg_state *st, const char *name) {
    for (int i = 0; i < FG_MAX_GROUPS; i++)
        if (!strcmp(st->sh->group[i].name, name))
            return &st->sh->group[i];
    return NULL;
}

/* Alone: kernels run back to back; a kernel's work counts as it runs; the drain bound is exact. */
static void alone(void) {
    fg_state a;
    CHECK(open_state(&a, "alone.state", "solo") == 0);
    const uint64_t t = 100 * S;
    at(&a, t);
    for (int i = 0; i < 3; i++)
        CHECK(fg_state_submit(&a, 0, 1 * MS, 1 * MS) == 0);
    CHECK(fg_state_drain_at(&a, 0) == t + 3 * MS);
    fg_state_unlock(&a);
    at(&a, t + 2 * MS + MS / 2);
    const fg_acct *r = record_of(&a, getpid());
    CHECK(r && r->w[0].kernels == 2 && r->w[0].work_ns == 2 * MS + MS / 2 && r->w[0].busy_ns == 2 * MS + MS / 2);
    CHECK(fg_state_drain_at(&a, 0) == t + 3 * MS);
    fg_state_unlock(&a);
    at(&a, t + 5 * MS);
    CHECK(fg_state_drain_at(&a, 0) == 0);
    const fg_group *g = group_named(&a, "solo");
    CHECK(g && g->w[0].kernels == 3 && g->w[0].work_ns == 3 * MS);
    CHECK(a.sh->unit[0].total.busy_ns == 3 * MS && a.sh->unit[0].total.kernels == 3);
    /* A kernel of no length completes at once; a faster-running one (FAKEGPU_POWER_BOOST) is
     * credited its nominal work as it runs. */
    CHECK(fg_state_submit(&a, 0, 0, 0) == 0);
    CHECK(fg_state_submit(&a, 0, 1 * MS, 2 * MS) == 0);
    fg_state_unlock(&a);
    at(&a, t + 5 * MS + MS / 4);
    CHECK(r->w[0].kernels == 4 && r->w[0].work_ns == 3 * MS + MS / 2 && r->w[0].busy_ns == 3 * MS + MS / 4);
    fg_state_unlock(&a);
    at(&a, t + 7 * MS);
    CHECK(r->w[0].kernels == 5 && r->w[0].work_ns == 5 * MS && r->w[0].busy_ns == 4 * MS);
    fg_state_unlock(&a);
    fg_state_detach(&a);
}

/* Two processes: 1 ms slices in turn, the long kernel preempted at each slice's end and resumed;
 * each credited exactly what ran; a queue alone keeps the engine; NVML's intervals follow. */
static void two_queues(void) {
    fg_state a;
    const uint64_t t = 100 * S;
    CHECK(open_at(&a, "two.state", "mine", t) == 0);
    child c = spawn("two.state", "theirs", t, 1, 10 * MS); /* one 10 ms kernel, queued first */
    CHECK(c.pid > 0);
    at(&a, t);
    CHECK(fg_state_submit(&a, 0, 1 * MS, 1 * MS) == 0 && fg_state_submit(&a, 0, 1 * MS, 1 * MS) == 0);
    /* The bound: 2 ms of own work + the neighbour's slice between its two turns. */
    uint64_t bound = fg_state_drain_at(&a, 0);
    CHECK_MSG(bound == t + 3 * MS, "drain bound %llu ms after t", (unsigned long long)((bound - t) / MS));
    fg_state_unlock(&a);
    at(&a, t + 3 * MS + MS / 2); /* theirs 0-1, mine 1-2, theirs 2-3, mine 3-3.5 */
    const fg_acct *mine = record_of(&a, getpid()), *theirs = record_of(&a, c.pid);
    CHECK(mine && theirs);
    CHECK(mine && mine->w[0].kernels == 1 && mine->w[0].work_ns == 1 * MS + MS / 2);
    CHECK(theirs && theirs->w[0].kernels == 0 && theirs->w[0].work_ns == 2 * MS); /* partly run, preempted */
    CHECK(fg_state_drain_at(&a, 0) == t + 4 * MS);
    CHECK(fg_state_busy_ns(&a, 0, (int32_t)c.pid, t + 3 * MS + MS / 2, S) == 2 * MS);
    CHECK(fg_state_busy_ns(&a, 0, (int32_t)getpid(), t + 3 * MS + MS / 2, S) == 1 * MS + MS / 2);
    fg_state_unlock(&a);
    at(&a, t + 4 * MS);
    CHECK(fg_state_drain_at(&a, 0) == 0);
    /* Queued while theirs holds the engine: it finishes its slice first (a bound that counts that
     * wakes a synchronising process when its work has run, not once per poll before). */
    fg_state_unlock(&a);
    at(&a, t + 4 * MS + MS / 4);
    CHECK(fg_state_submit(&a, 0, 1 * MS, 1 * MS) == 0);
    bound = fg_state_drain_at(&a, 0);
    CHECK_MSG(bound == t + 6 * MS, "drain bound %llu us after t", (unsigned long long)((bound - t) / 1000));
    fg_state_unlock(&a);
    at(&a, t + 6 * MS);
    CHECK(fg_state_drain_at(&a, 0) == 0);
    fg_state_unlock(&a);
    at(&a, t + 20 * MS); /* theirs alone from 6 ms: done at 13 ms */
    CHECK(theirs && theirs->w[0].kernels == 1 && theirs->w[0].work_ns == 10 * MS && theirs->w[0].busy_ns == 10 * MS);
    CHECK(a.sh->unit[0].total.busy_ns == 13 * MS && a.sh->unit[0].total.work_ns == 13 * MS);
    CHECK(fg_state_util(&a, 0, 0, t + 20 * MS, 20 * MS) == 65);
    const fg_group *g = group_named(&a, "theirs");
    CHECK(g && g->w[0].work_ns == 10 * MS && g->w[0].kernels == 1);
    fg_state_unlock(&a);
    reap_child(c, 0);
    /* The process has exited: its record stays, marked so. */
    at(&a, t + 21 * MS);
    CHECK(theirs && theirs->slot == -1 && theirs->w[0].work_ns == 10 * MS);
    fg_state_unlock(&a);
    fg_state_detach(&a);
}

/* Round robin over three queues; a queue that runs dry gives the engine up at once. */
static void three_queues(void) {
    fg_state a;
    const uint64_t t = 100 * S;
    CHECK(open_at(&a, "three.state", "", t) == 0);
    child b = spawn("three.state", "b", t, 1, 5 * MS), c = spawn("three.state", "c", t, 1, MS / 2);
    CHECK(b.pid > 0 && c.pid > 0);
    at(&a, t);
    CHECK(fg_state_submit(&a, 0, 5 * MS, 5 * MS) == 0);
    fg_state_unlock(&a);
    /* b 0-1, c 1-1.5 (dry), a 1.5-2.5, b 2.5-3.5, a 3.5-4.5, ... */
    at(&a, t + 4 * MS + MS / 2);
    const fg_acct *ra = record_of(&a, getpid()), *rb = record_of(&a, b.pid), *rc = record_of(&a, c.pid);
    CHECK(ra && rb && rc);
    CHECK(rc && rc->w[0].kernels == 1 && rc->w[0].busy_ns == MS / 2);
    CHECK(rb && rb->w[0].busy_ns == 2 * MS);
    CHECK(ra && ra->w[0].busy_ns == 2 * MS);
    CHECK(a.sh->unit[0].total.busy_ns == 4 * MS + MS / 2);
    /* No group named, no group record. */
    CHECK(ra && ra->group == -1);
    fg_state_unlock(&a);
    /* b dies: its work is dropped, a runs alone. */
    reap_child(b, 1);
    at(&a, t + 10 * MS);
    CHECK(ra->w[0].kernels == 1 && ra->w[0].busy_ns == 5 * MS);
    CHECK(a.sh->unit[0].total.busy_ns == 7 * MS + MS / 2); /* b's unrun work never ran */
    CHECK(rb && rb->slot == -1 && rb->w[0].kernels == 0);
    fg_state_unlock(&a);
    reap_child(c, 0);
    fg_state_detach(&a);
}

/* The launch queue's bounds: FG_CHAN_DEPTH kernels, and FG_QUEUE_NS of work behind the head. */
static void bounds(void) {
    fg_state a;
    CHECK(open_state(&a, "bounds.state", "") == 0);
    const uint64_t t = 100 * S;
    at(&a, t);
    int ok = 1;
    for (int i = 0; i < FG_CHAN_DEPTH; i++)
        ok &= fg_state_submit(&a, 0, 10, 10) == 0;
    CHECK(ok);
    CHECK(fg_state_submit(&a, 0, 10, 10) == 10); /* full: wait for the head kernel */
    fg_state_unlock(&a);
    at(&a, t + 10);
    CHECK(fg_state_submit(&a, 0, 10, 10) == 0);
    fg_state_unlock(&a);
    at(&a, t + S);
    CHECK(fg_state_submit(&a, 0, 2 * S, 2 * S) == 0);
    CHECK(fg_state_submit(&a, 0, 10, 10) == (int64_t)S); /* 2 s queued: wait until 1 s is left */
    fg_state_unlock(&a);
    at(&a, t + 2 * S);
    CHECK(fg_state_submit(&a, 0, 10, 10) == 0);
    fg_state_unlock(&a);
    fg_state_detach(&a);
}

/* Records: a new process takes a free record, else the oldest dead process's (counted); when
 * every record is a live process's, none (counted: a reader refuses the figures). A full
 * container table is counted as well. */
static void records(void) {
    fg_state a;
    CHECK(open_state(&a, "records.state", "") == 0);
    at(&a, 100 * S);
    for (int i = 0; i < FG_MAX_ACCTS; i++) /* every record taken by an exited process */
        a.sh->acct[i] = (fg_acct){.used = 1, .pid = 1000 + i, .slot = -1, .group = -1, .started = (uint64_t)(FG_MAX_ACCTS - i)};
    for (int i = 0; i < FG_MAX_GROUPS; i++)
        snprintf(a.sh->group[i].name, sizeof a.sh->group[i].name, "g%d", i);
    fg_copy(a.group, sizeof a.group, "new");
    CHECK(fg_state_submit(&a, 0, 10, 10) == 0);
    const fg_acct *r = record_of(&a, getpid());
    CHECK(r == &a.sh->acct[FG_MAX_ACCTS - 1] && a.sh->accts_recycled == 1); /* the oldest */
    CHECK(a.sh->groups_missing == 1 && r->group == -1);
    fg_state_unlock(&a);
    fg_state_detach(&a);

    CHECK(open_state(&a, "records2.state", "") == 0);
    at(&a, 100 * S);
    for (int i = 0; i < FG_MAX_ACCTS; i++) /* every record a live process's */
        a.sh->acct[i] = (fg_acct){.used = 1, .pid = 1000 + i, .slot = 5, .group = -1};
    CHECK(fg_state_submit(&a, 0, 10, 10) == 0); /* the work still runs, unrecorded */
    CHECK(a.sh->accts_missing == 1 && record_of(&a, getpid()) == NULL);
    fg_state_unlock(&a);
    at(&a, 101 * S);
    CHECK(a.sh->unit[0].total.kernels == 1);
    /* Every queue taken (by other processes' slots): a launch on another unit is refused. */
    for (int i = 0; i < FG_MAX_CHANNELS; i++)
        if (!a.sh->chan[i].in_use)
            a.sh->chan[i] = (fg_chan){.in_use = 1, .slot = 99, .unit = 1, .acct = -1};
    CHECK(fg_state_submit(&a, 1, 10, 10) == -1);
    CHECK(fg_state_submit(&a, 0, 10, 10) == 0); /* its own queue on unit 0 is still there */
    fg_state_unlock(&a);
    fg_state_detach(&a);
}

/* A process that dies holding the lock half-way through the engines' bookkeeping (here: the
 * unit's count of queues with work zeroed) leaves nothing stuck: the next locker rebuilds it from
 * the queued kernels, and the queued work runs. */
static void repaired_after_a_dead_holder(void) {
    fg_state a;
    const uint64_t t = 100 * S;
    CHECK(open_at(&a, "repair.state", "", t) == 0);
    at(&a, t);
    CHECK(fg_state_submit(&a, 0, 1 * MS, 1 * MS) == 0);
    fg_state_unlock(&a);
    pid_t pid = fork();
    if (pid == 0) {
        fg_state c;
        if (open_state(&c, "repair.state", "") != 0)
            _exit(2);
        at(&c, t);
        c.sh->unit[0].active = 0;
        c.sh->chan[0].queued = 12345;
        _exit(0); /* still holding the lock */
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    at(&a, t + 2 * MS);
    const fg_acct *r = record_of(&a, getpid());
    CHECK(r && r->w[0].kernels == 1 && r->w[0].busy_ns == 1 * MS);
    CHECK(a.sh->unit[0].active == 0 && a.sh->chan[0].queued == 0);
    fg_state_unlock(&a);
    fg_state_detach(&a);
}

/* Every process of a GPU runs the same time slice: another length is refused. */
static void one_timeslice(void) {
    char p[300], err[512];
    fg_state a, b;
    CHECK(open_state(&a, "slice.state", "") == 0);
    snprintf(p, sizeof p, "%s/slice.state", fg_test_dir());
    CHECK(fg_state_attach(&b, p, 7, 2, err, sizeof err) == 0);
    CHECK(fg_state_engine(&b, 2 * MS, "", err, sizeof err) == -1 && strstr(err, "FAKEGPU_TIMESLICE_US"));
    fg_state_detach(&b);
    fg_state_detach(&a);
}

void test_timeline(void) {
    alone();
    two_queues();
    three_queues();
    bounds();
    records();
    repaired_after_a_dead_holder();
    one_timeslice();
}
