/* The shared region: creation and stamping, first writer wins, reservation under concurrency,
 * dead-slot reclaim through fcntl locks, robust-mutex recovery, layout mismatch fallback. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "limitsfile.h"
#include "region.h"
#include "unit.h"

#define MIB (1ULL << 20)

static struct lb_config make_cfg(const char *path, uint64_t limit0)
{
    struct lb_config c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < LB_MAX_DEVICES; i++) {
        c.mem_limit[i] = LB_MEM_UNLIMITED;
        c.sm_limit[i] = 100;
    }
    c.mem_limit[0] = limit0;
    c.priority = 1;
    snprintf(c.cache_path, sizeof c.cache_path, "%s", path);
    return c;
}

static void cache_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s.cache", unit_tmp_dir, name);
    unlink(buf);
}

/* Run fn in a child process; return its exit status (or 128+signal). */
static int in_child(void (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) {
        alarm(20);
        fn(arg);
        _exit(unit_case_failed ? 1 : 0);
    }
    int st;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int reserve(uint64_t b) { return lb_region_reserve(0, b); }

static void test_create_and_stamp(void)
{
    char p[512];
    cache_path(p, sizeof p, "create");
    mode_t old = umask(022);
    struct lb_config c = make_cfg(p, 3000 * MIB);
    c.sm_limit[0] = 50;
    lb_region_init(&c);
    CHECK(umask(022) == 022); /* never left changed */
    umask(old);
    struct stat st;
    CHECK(stat(p, &st) == 0);
    CHECK_U64(st.st_size, LB_REGION_FILE_SIZE);
    CHECK_U64(st.st_mode & 0777, 0666);
    CHECK(lb_region != NULL);
    CHECK_U64(lb_region->magic, LB_REGION_MAGIC);
    CHECK_U64(lb_region->version, LB_REGION_VERSION);
    CHECK_U64(lb_region->mem_limit[0], 3000 * MIB);
    CHECK_U64(lb_region->mem_limit[1], LB_MEM_UNLIMITED);
    CHECK_U64(lb_region->sm_limit[0], 50);
    CHECK_U64(lb_region->creator_pid, getpid());
    CHECK_U64(lb_region->slot_hwm, 1);
    struct lb_region_slot *s = lb_region_slots(lb_region);
    CHECK_U64(s[0].state, LB_SLOT_ACTIVE);
    CHECK_U64(s[0].pid, getpid());
}

static void child_attach_reserve(void *arg)
{
    const char *p = arg;
    struct lb_config c = make_cfg(p, 3000 * MIB);
    lb_region_init(&c);
    if (!reserve(2000 * MIB))
        unit_fail(__FILE__, __LINE__, "2000 MiB refused");
}

static void child_second_refused(void *arg)
{
    const char *p = arg;
    struct lb_config c = make_cfg(p, 9000 * MIB); /* different limits: the region's win */
    lb_region_init(&c);
    CHECK_U64(lb_region->mem_limit[0], 3000 * MIB);
    if (reserve(2000 * MIB))
        unit_fail(__FILE__, __LINE__, "second 2000 MiB granted over a 3000 MiB limit");
    CHECK(reserve(1000 * MIB)); /* exactly up to the limit is fine */
}

static void child_die_holding(void *arg)
{
    child_attach_reserve(arg);
    raise(SIGKILL); /* no cleanup of any kind */
}

static void test_two_processes_and_reclaim(void)
{
    char p[512];
    cache_path(p, sizeof p, "two");
    /* A holds 2000 MiB and stays alive while B asks; then A dies and C gets the memory. */
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    fflush(NULL);
    pid_t a = fork();
    if (a == 0) {
        close(pipefd[0]);
        child_attach_reserve(p);
        CHECK(write(pipefd[1], "x", 1) == 1);
        pause();
        _exit(0);
    }
    close(pipefd[1]);
    char x;
    CHECK(read(pipefd[0], &x, 1) == 1);
    CHECK(in_child(child_second_refused, p) == 0);
    kill(a, SIGKILL);
    waitpid(a, NULL, 0);
    CHECK(in_child(child_attach_reserve, p) == 0);
    /* A process that dies by SIGKILL while holding memory is reclaimed too. */
    CHECK(in_child(child_die_holding, p) == 128 + SIGKILL);
}

static struct {
    _Atomic uint64_t granted;
    _Atomic int over;
    _Atomic uint64_t max_seen;
} g_conc;

static void *hammer(void *arg)
{
    (void)arg;
    for (int i = 0; i < 20000; i++) {
        uint64_t b = (uint64_t)(1 + (i % 7)) * 100 * MIB;
        if (!reserve(b))
            continue;
        uint64_t now = atomic_fetch_add(&g_conc.granted, b) + b;
        if (now > 3000 * MIB)
            atomic_store(&g_conc.over, 1);
        uint64_t m = atomic_load(&g_conc.max_seen);
        while (now > m && !atomic_compare_exchange_weak(&g_conc.max_seen, &m, now))
            ;
        atomic_fetch_sub(&g_conc.granted, b);
        lb_region_release(0, b);
    }
    return NULL;
}

static void child_threads(void *arg)
{
    struct lb_config c = make_cfg(arg, 3000 * MIB);
    lb_region_init(&c);
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, hammer, NULL);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
}

static void test_concurrent_never_exceeds(void)
{
    char p[512];
    cache_path(p, sizeof p, "threads");
    /* Two processes x 8 threads on one region. */
    fflush(NULL);
    pid_t other = fork();
    if (other == 0) {
        child_threads(p);
        _exit(atomic_load(&g_conc.over) ? 1 : 0);
    }
    child_threads(p);
    int st;
    waitpid(other, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(!atomic_load(&g_conc.over));
    CHECK(atomic_load(&g_conc.max_seen) > 0);
    CHECK_U64(lb_region_usage(0), 0);
}

static void child_die_in_mutex(void *arg)
{
    struct lb_config c = make_cfg(arg, 3000 * MIB);
    lb_region_init(&c);
    pthread_mutex_lock(&lb_region->mutex.m);
    raise(SIGKILL);
}

static void test_robust_mutex_recovers(void)
{
    char p[512];
    cache_path(p, sizeof p, "robust");
    CHECK(in_child(child_die_in_mutex, p) == 128 + SIGKILL);
    /* Claiming a slot takes the mutex: must recover (EOWNERDEAD), not hang (alarm would fire). */
    CHECK(in_child(child_attach_reserve, p) == 0);
    CHECK(in_child(child_attach_reserve, p) == 0);
}

static void test_layout_mismatch_falls_back(void)
{
    char p[512];
    cache_path(p, sizeof p, "upstream");
    /* An upstream HAMi-core region: int32 magic 19920718 at offset 0, 2,008,952 bytes. */
    int fd = open(p, O_RDWR | O_CREAT, 0644);
    CHECK(ftruncate(fd, 2008952) == 0);
    int32_t magic = 19920718;
    CHECK(pwrite(fd, &magic, 4, 0) == 4);
    close(fd);
    struct lb_config c = make_cfg(p, 3000 * MIB);
    lb_region_init(&c);
    CHECK(lb_region != NULL); /* private region: never crash, never uncapped */
    CHECK_U64(lb_region->mem_limit[0], 3000 * MIB);
    CHECK(reserve(2000 * MIB));
    CHECK(!reserve(2000 * MIB));
    struct stat st;
    CHECK(stat(p, &st) == 0);
    CHECK_U64(st.st_size, 2008952); /* untouched */
    /* A same-size file with a wrong magic is refused too. */
    char q[512];
    cache_path(q, sizeof q, "badmagic");
    fd = open(q, O_RDWR | O_CREAT, 0644);
    CHECK(ftruncate(fd, LB_REGION_FILE_SIZE) == 0);
    CHECK(pwrite(fd, "NOTOURS!", 8, 0) == 8);
    close(fd);
    CHECK(in_child(child_attach_reserve, q) == 0);
    fd = open(q, O_RDONLY);
    char b[8];
    CHECK(pread(fd, b, 8, 0) == 8 && memcmp(b, "NOTOURS!", 8) == 0);
    close(fd);
}

static void test_unopenable_path_falls_back(void)
{
    struct lb_config c = make_cfg("/nonexistent-dir/usage.cache", 1000 * MIB);
    lb_region_init(&c);
    CHECK(lb_region != NULL);
    CHECK(reserve(1000 * MIB));
    CHECK(!reserve(1));
}

static void test_fork_child_own_slot(void)
{
    char p[512];
    cache_path(p, sizeof p, "fork");
    struct lb_config c = make_cfg(p, 3000 * MIB);
    lb_region_init(&c);
    CHECK(reserve(1000 * MIB));
    fflush(NULL);
    pid_t ch = fork();
    if (ch == 0) {
        lb_region_after_fork(); /* what the atfork child handler does */
        int ok = reserve(1500 * MIB) && !reserve(1000 * MIB);
        struct lb_region_slot *s = lb_region_slots(lb_region);
        int slots = 0;
        for (uint32_t i = 0; i < lb_region->slot_hwm; i++)
            if (s[i].state == LB_SLOT_ACTIVE && s[i].used[0])
                slots++;
        _exit(ok && slots == 2 ? 0 : 1);
    }
    int st;
    waitpid(ch, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* The parent still has its 1000 MiB; the dead child's 1500 MiB is reclaimed on demand. */
    CHECK(reserve(2000 * MIB));
}

/* The program closes every descriptor, or the region's own one, or opens and closes usage.cache:
 * the process still counts as alive (its lock lives on the description the region is mapped
 * from). And a child forked with no descriptor to spare, which shares the parent's description
 * until it can open its own, never takes the parent for dead. */
static void test_liveness_survives_descriptors(void)
{
    char p[512];
    cache_path(p, sizeof p, "liveness");
    struct lb_config c = make_cfg(p, 3000 * MIB);
    lb_region_init(&c);
    CHECK(reserve(2000 * MIB));
    int fd = open(p, O_RDONLY); /* a POSIX lock would be dropped by this close */
    close(fd);
    for (int i = 3; i < 1024; i++) /* closefrom(3): the library's descriptor goes too */
        close(i);
    fflush(NULL);
    int fds[65536], n = 0;
    while (n < 65536 && (fds[n] = open("/dev/null", O_RDONLY)) >= 0)
        n++;
    pid_t ch = fork();
    if (ch == 0) {
        lb_region_after_fork(); /* no descriptor to open its own: shares the parent's for now */
        int refused = !reserve(2000 * MIB); /* the parent is alive: refused, never reclaimed */
        while (n > 0)
            close(fds[--n]);
        int again = !reserve(2000 * MIB); /* now with its own description: still refused */
        _exit(refused && again ? 0 : 1);
    }
    while (n > 0)
        close(fds[--n]);
    int st;
    waitpid(ch, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    pid_t other = fork();
    if (other == 0) {
        /* Another process of the pod, as a new one would be: its own region attachment. */
        lb_region_after_fork();
        _exit(reserve(2000 * MIB) ? 1 : 0);
    }
    waitpid(other, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(reserve(1000 * MIB)); /* and this process's own accounting still works */
}

/* A process killed between adding to the container total and to its own slot leaves the total
 * too high (the safe direction); the next process that finds nobody else alive repairs it. */
static void child_leak_and_die(void *arg)
{
    struct lb_config c = make_cfg(arg, 3000 * MIB);
    lb_region_after_fork(); /* a new process: its own slot, even when forked from an attached one */
    lb_region_init(&c);
    CHECK(reserve(1000 * MIB));
    atomic_fetch_add(&lb_region->used_total[0], 500 * MIB); /* the half-done reservation */
    raise(SIGKILL);
}

static void child_expect_total(void *arg)
{
    struct lb_config c = make_cfg(arg, 3000 * MIB);
    lb_region_init(&c);
    CHECK_U64(lb_region_usage(0), 0);
    CHECK(reserve(3000 * MIB));
    CHECK_U64(lb_region_usage(0), 3000 * MIB);
}

static void test_total_tracks_slots_and_is_repaired(void)
{
    char p[512];
    cache_path(p, sizeof p, "total");
    struct lb_config c = make_cfg(p, 3000 * MIB);
    lb_region_init(&c);
    CHECK(reserve(1000 * MIB));
    CHECK_U64(lb_region_usage(0), 1000 * MIB);
    lb_region_release(0, 400 * MIB);
    CHECK_U64(lb_region_usage(0), 600 * MIB);
    CHECK_U64(lb_region_slots(lb_region)[0].used[0], 600 * MIB);
    /* While we live, a dead process's leak is only reclaimed by what its slot says. */
    CHECK(in_child(child_leak_and_die, p) == 128 + SIGKILL);
    CHECK(!reserve(2000 * MIB)); /* its 1000 are reclaimed, the 500 leaked stay: 600 + 500 + 2000 > 3000 */
    CHECK_U64(lb_region_usage(0), 1100 * MIB);
}

static void test_total_repaired_when_alone(void)
{
    char p[512];
    cache_path(p, sizeof p, "repair");
    CHECK(in_child(child_leak_and_die, p) == 128 + SIGKILL);
    CHECK(in_child(child_expect_total, p) == 0);
}

const struct unit_test unit_region_tests[] = {
    {"region/container total follows reserve, release and reclaim", test_total_tracks_slots_and_is_repaired},
    {"region/over-counted total is repaired when no process lives", test_total_repaired_when_alone},
    {"region/create and stamp", test_create_and_stamp},
    {"region/two processes, first writer wins, SIGKILL reclaim", test_two_processes_and_reclaim},
    {"region/concurrent threads never exceed the limit", test_concurrent_never_exceeds},
    {"region/robust mutex recovers from a dead holder", test_robust_mutex_recovers},
    {"region/layout mismatch falls back to a private region", test_layout_mismatch_falls_back},
    {"region/unopenable path falls back", test_unopenable_path_falls_back},
    {"region/fork child gets its own slot", test_fork_child_own_slot},
    {"region/liveness survives closed descriptors and a fork without any", test_liveness_survives_descriptors},
    {NULL, NULL},
};
