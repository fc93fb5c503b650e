/* The scheduler protocol's files, the library's side (schedclient.h). */
#include "schedclient.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

const struct lb_sched_grant *lb_grant;
struct lb_sched_report *lb_report;
uint64_t lb_grant_ino;

/* The grant file: the node's, read-only here; anything but a whole grant file of this version is
 * no scheduler (the library paces itself; the scheduler then never sees it wait). */
static const struct lb_sched_grant *map_grant(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno != ENOENT)
            LB_WARN("compute limit: %s: cannot open (errno %d): no node scheduler", path, errno);
        return NULL;
    }
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == LB_SCHED_FILE_SIZE) {
        lb_grant_ino = (uint64_t)st.st_ino;
        p = mmap(NULL, LB_SCHED_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    }
    close(fd);
    if (p == MAP_FAILED) {
        LB_WARN("compute limit: %s is not a %u-byte grant file: no node scheduler", path, LB_SCHED_FILE_SIZE);
        return NULL;
    }
    const struct lb_sched_grant *g = p;
    if (g->magic != LB_SCHED_GRANT_MAGIC || g->version != LB_SCHED_VERSION || g->ngpus == 0 ||
        g->ngpus > LB_SCHED_MAX_GPUS) {
        LB_WARN("compute limit: %s: magic %llx version %u, %u GPUs: not a grant file this library reads (version %u); no "
                "node scheduler",
                path, (unsigned long long)g->magic, g->version, g->ngpus, LB_SCHED_VERSION);
        munmap(p, LB_SCHED_FILE_SIZE);
        return NULL;
    }
    return g;
}

/* The report: created by the first process of the container, shared by all (any uid: 0666, as
 * usage.cache), one page; a file of another size is made one (a process of the container is the
 * only one that could have made it so). */
static struct lb_sched_report *map_report(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666);
    if (fd < 0) {
        LB_ERROR("compute limit: %s: cannot create the scheduler report (errno %d)", path, errno);
        return NULL;
    }
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        if (st.st_uid == geteuid())
            (void)fchmod(fd, 0666); /* umask untouched */
        if (st.st_size == LB_SCHED_FILE_SIZE || ftruncate(fd, LB_SCHED_FILE_SIZE) == 0)
            p = mmap(NULL, LB_SCHED_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    close(fd);
    if (p == MAP_FAILED) {
        LB_ERROR("compute limit: %s: cannot map the scheduler report", path);
        return NULL;
    }
    struct lb_sched_report *r = p;
    _Atomic uint64_t *magic = (_Atomic uint64_t *)&r->magic;
    uint64_t m = atomic_load(magic);
    if (m != LB_SCHED_REPORT_MAGIC) {
        /* Version first, magic last: the scheduler reads a report only once its magic is set. */
        atomic_store((_Atomic uint32_t *)&r->version, LB_SCHED_VERSION);
        atomic_compare_exchange_strong(magic, &m, LB_SCHED_REPORT_MAGIC);
    }
    if (atomic_load((_Atomic uint32_t *)&r->version) != LB_SCHED_VERSION) {
        LB_ERROR("compute limit: %s: a report of version %u, this library writes %u", path, r->version,
                 LB_SCHED_VERSION);
        munmap(p, LB_SCHED_FILE_SIZE);
        return NULL;
    }
    atomic_fetch_or((_Atomic uint32_t *)&r->features, LB_REPORT_F_LIVE);
    return r;
}

/* Liveness of a joined process (LB_REPORT_F_LIVE): a shared lock on the entry's byte of the
 * report, through a description of this process's own (a forked child opens its own: a lock
 * taken through the parent's would be the parent's), which a mapping holds open, so the lock
 * lasts as long as the process even if the program closes the descriptor (it then stays held
 * until the process ends: a slice read as still running, charged to this container). */
static char g_report_path[256];
static pthread_mutex_t g_live_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_live_fd = -1;
static pid_t g_live_pid;
static dev_t g_live_dev;
static ino_t g_live_ino;

static int live_fd(void)
{
    struct stat st;
    pid_t me = getpid();
    if (g_live_fd >= 0 && g_live_pid == me && fstat(g_live_fd, &st) == 0 && st.st_dev == g_live_dev &&
        st.st_ino == g_live_ino)
        return g_live_fd;
    int fd = open(g_report_path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return -1;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == LB_SCHED_FILE_SIZE)
        p = mmap(NULL, LB_SCHED_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return -1;
    }
    /* The program's number, if it took ours, stays the program's: never closed here. */
    g_live_fd = fd, g_live_pid = me, g_live_dev = st.st_dev, g_live_ino = st.st_ino;
    return fd;
}

/* A fork while another thread takes a lock: the child's mutex is released, as every module's. */
static void live_prepare(void) { pthread_mutex_lock(&g_live_mu); }
static void live_parent(void) { pthread_mutex_unlock(&g_live_mu); }
static void __attribute__((constructor(101))) live_register_fork(void)
{
    pthread_atfork(live_prepare, live_parent, live_parent);
}

static void live(int e, short type)
{
    if (!g_report_path[0])
        return;
    pthread_mutex_lock(&g_live_mu);
    int fd = live_fd();
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = LB_SCHED_LIVE_BYTE(e), .l_len = 1};
    if (fd >= 0)
        (void)fcntl(fd, F_OFD_SETLK, &fl); /* a shared lock never conflicts: only an error (EBADF) fails it */
    pthread_mutex_unlock(&g_live_mu);
}

int lb_sched_attach(const char *grant_path, const char *report_path)
{
    const struct lb_sched_grant *g = map_grant(grant_path);
    if (!g) {
        LB_INFO("compute limit: no node scheduler (%s): a limited device is paced by this library alone", grant_path);
        return 0;
    }
    struct lb_sched_report *r = map_report(report_path);
    size_t n = strlen(report_path);
    if (r && n < sizeof g_report_path)
        memcpy(g_report_path, report_path, n + 1);
    /* Without a report the grant still rules: pacing alone beside the node's slices would take
     * the neighbours' time. The node reads a container without a readable report as always busy:
     * it gets its slices, each charged whole, and no more. */
    if (!r)
        LB_ERROR("compute limit: %s: no scheduler report: launches still follow the node's grants, and this "
                 "container is charged every slice whole; remove what is in the report's place",
                 report_path);
    lb_grant = g, lb_report = r;
    LB_INFO("compute limit: the node scheduler grants this container's GPUs (%u in %s): launches follow its slices",
            g->ngpus, grant_path);
    return 1;
}

#ifdef LB_UNIT_TEST
void lb_sched_detach(void)
{
    if (lb_grant)
        munmap((void *)lb_grant, LB_SCHED_FILE_SIZE);
    if (lb_report)
        munmap(lb_report, LB_SCHED_FILE_SIZE);
    lb_grant = NULL, lb_report = NULL;
    g_report_path[0] = 0;
    if (g_live_fd >= 0)
        close(g_live_fd);
    g_live_fd = -1;
}
#endif

int lb_sched_entry(const uint8_t uuid[16])
{
    static const uint8_t zero[16];
    if (!lb_grant || !memcmp(uuid, zero, sizeof zero))
        return -1;
    uint32_t n = lb_grant->ngpus;
    for (uint32_t i = 0; i < n && i < LB_SCHED_MAX_GPUS; i++)
        if (!memcmp(lb_grant->gpu[i].uuid, uuid, 16))
            return (int)i;
    return -1;
}

static uint32_t joins_of(uint64_t j) { return (uint32_t)(j >> LB_JOIN_JOINS_SHIFT) & LB_JOIN_COUNT_MASK; }
static uint32_t drains_of(uint64_t j) { return (uint32_t)j & LB_JOIN_COUNT_MASK; }
static uint64_t join_word(uint32_t g, uint32_t joins, uint32_t drains)
{
    return (uint64_t)g << LB_JOIN_GRANT_SHIFT | (uint64_t)joins << LB_JOIN_JOINS_SHIFT | drains;
}

uint64_t lb_join_add(uint64_t j, uint32_t g)
{
    if ((uint32_t)(j >> LB_JOIN_GRANT_SHIFT) != g)
        return join_word(g, 1, 0);
    uint32_t n = joins_of(j);
    return join_word(g, n < LB_JOIN_COUNT_MASK ? n + 1 : n, drains_of(j));
}

uint64_t lb_join_drain(uint64_t j, uint32_t g)
{
    uint32_t n = drains_of(j);
    if ((uint32_t)(j >> LB_JOIN_GRANT_SHIFT) != g || n >= joins_of(j))
        return j;
    return join_word(g, joins_of(j), n + 1);
}

static _Atomic uint64_t *join_of(int e) { return (_Atomic uint64_t *)&lb_report->gpu[e].join; }

static void ring(int e)
{
    _Atomic uint32_t *bell = (_Atomic uint32_t *)&lb_report->gpu[e].bell;
    atomic_fetch_add(bell, 1);
    lb_futex_wake(bell);
}

void lb_sched_join(int e, uint32_t g)
{
    if (!lb_report)
        return;
    _Atomic uint64_t *w = join_of(e);
    uint64_t j = atomic_load(w);
    live(e, F_RDLCK); /* before the join is seen: a joiner the node counts is never read as gone */
    while (!atomic_compare_exchange_weak(w, &j, lb_join_add(j, g)))
        ;
    ring(e); /* the slice is charged from its first launch */
}

void lb_sched_drained(int e, uint32_t g)
{
    if (!lb_report)
        return;
    _Atomic uint64_t *w = join_of(e);
    uint64_t j = atomic_load(w);
    while (!atomic_compare_exchange_weak(w, &j, lb_join_drain(j, g)))
        ;
    live(e, F_UNLCK); /* after the drain is counted: never a moment read as gone while counted in */
    ring(e);
}

void lb_sched_want(int e)
{
    if (lb_report)
        atomic_fetch_add_explicit((_Atomic uint32_t *)&lb_report->gpu[e].want, 1, memory_order_relaxed);
}

void lb_sched_active(int e, uint32_t seq)
{
    if (lb_report)
        atomic_store_explicit((_Atomic uint32_t *)&lb_report->gpu[e].active, seq, memory_order_relaxed);
}

void lb_futex_wait(const _Atomic uint32_t *w, uint32_t v, int64_t ns)
{
    if (ns <= 0)
        return;
    struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    (void)syscall(SYS_futex, w, FUTEX_WAIT, v, &ts, NULL, 0);
}

void lb_futex_wake(const _Atomic uint32_t *w) { (void)syscall(SYS_futex, w, FUTEX_WAKE, 1 << 30, NULL, NULL, 0); }
