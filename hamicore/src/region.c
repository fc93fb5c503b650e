/*
 * The shared usage region (layout: include/limitbed/region.h, docs/usage-cache.md).
 *
 * Creation is serialised with a blocking fcntl lock on the creation byte of the companion lock
 * range (released by the kernel if the creator dies); the magic is written last, so a region
 * without it is re-initialised by the next process. Slot bookkeeping runs under a process-shared
 * robust mutex inside the file (a holder that dies leaves EOWNERDEAD, which we make consistent).
 * Each live process holds a write lock on its slot's byte: F_OFD_GETLK tells any process, in any
 * PID namespace, whether the owner still lives, so dead slots are reclaimed without kill().
 *
 * The descriptor is the program's to close (closefrom, a double close, dup2 over it). The locks
 * are open-file-description locks: they last as long as the description, and the mapping holds
 * the description open until the process dies, so closing the descriptor — or any other
 * descriptor of the file, which drops classic POSIX locks — ends no liveness. Before the
 * descriptor is used it is checked to still be ours (the file's device and inode, and the file
 * position our description is parked at, LB_FD_MARK); if it is not, the file is opened again by
 * its path and the number is left to the program: the library never asks a file of the
 * program's who lives, nor locks or closes it. A forked child maps the file through a
 * description of its own, so that a dead parent's lock does not live on in it.
 *
 * Library manners: no umask change (fchmod of a file we created instead), no signal handlers,
 * no exit(); a failure of the file degrades to a private region with the process's own limits,
 * a failure of the process (no descriptor or memory to spare) refuses every allocation instead.
 */
#include "region.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fmt.h"
#include "guard.h"
#include "limitsfile.h"
#include "log.h"

struct lb_region_header *lb_region;
_Atomic(struct lb_region_slot *) lb_region_slot;
uint64_t lb_own_limit[LB_REGION_MAX_DEVICES];
const char *lb_region_refusal;
static int g_fd = -1;
/* g_fd is a description of this process's own. 0 in a forked child until it has one: the
 * inherited description is the parent's, and through it the parent's lock reads as no lock at
 * all (a description never conflicts with itself), so no liveness is judged through it. */
static int g_fd_own = 1;
static dev_t g_dev; /* the file g_fd was opened on */
static ino_t g_ino;
static char g_path[LB_LINE_MAX]; /* to open it again; empty for the private memfd */
static int g_slot_idx = -1;
static pthread_mutex_t g_claim_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lb_region_slot g_overflow_slot; /* all slots taken: account locally only */

/* Our description's file position: nothing reads or writes through the descriptor (pread and
 * mmap take their own offsets), so a description parked here is ours; a fresh one is at 0. */
#define LB_FD_MARK (((off_t)1 << 30) | 0x1bed)

static int fd_ours(void)
{
    struct stat st;
    return g_fd >= 0 && fstat(g_fd, &st) == 0 && st.st_dev == g_dev && st.st_ino == g_ino &&
           lseek(g_fd, 0, SEEK_CUR) == LB_FD_MARK;
}

/* Records what fd names and parks its description at the mark; 0 or -1 (a different file). */
static int adopt(int fd, int check)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || (check && (st.st_dev != g_dev || st.st_ino != g_ino)) ||
        lseek(fd, LB_FD_MARK, SEEK_SET) != LB_FD_MARK)
        return -1;
    g_dev = st.st_dev, g_ino = st.st_ino;
    return 0;
}

/* A new description of the region's file: by its path, or for the memfd through /proc while our
 * descriptor lives. pin: map the region through it (the description, and the locks taken through
 * it, then last as long as the process; the old mapping's description is let go). */
static int reopen(int pin)
{
    char proc[48];
    const char *path = g_path;
    if (!g_path[0]) {
        if (!fd_ours())
            return -1;
        lb_fmt(proc, sizeof proc, "/proc/self/fd/%d", g_fd);
        path = proc;
    }
    int fd = open(path, O_RDWR | O_CLOEXEC | (path == g_path ? O_NOFOLLOW : 0)); /* /proc's is a link */
    if (fd < 0)
        return -1;
    if (adopt(fd, 1) != 0 ||
        (pin && mmap(lb_region, LB_REGION_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Before any lock query or claim, under the mutex: g_fd is ours, or a new descriptor of the
 * file, or -1 (every slot then counts as alive and none can be claimed: fail closed). While we
 * hold a slot, the old mapping keeps our lock: the new description is only asked through. */
static void own_description(void);
static void check_fd(void)
{
    if (!g_fd_own)
        own_description(); /* a child that could not make its own at the fork: try again */
    if (fd_ours())
        return;
    /* Gone, or lost before (the descriptor table was full then): asked again each time, so a
     * descriptor table that was full once does not leave the process without one for good. */
    g_fd = reopen(g_slot_idx < 0);
}

static int lock_byte(int cmd, short type, off_t off)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = off, .l_len = 1};
    int r;
    do
        r = fcntl(g_fd, cmd, &fl);
    while (r != 0 && errno == EINTR);
    return r;
}

/* Is the owner of slot i alive? Unknown counts as alive: never reclaim on doubt. */
static int slot_alive(int i)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = LB_REGION_LOCK_OFFSET + 1 + i, .l_len = 1};
    if (!g_fd_own || fcntl(g_fd, F_OFD_GETLK, &fl) != 0)
        return 1;
    return fl.l_type != F_UNLCK;
}

static int mutex_lock(void)
{
    lb_guard_enter(); /* guard.h: a signal handler must not wait for it */
    int r = pthread_mutex_lock(&lb_region->mutex.m);
    if (r == EOWNERDEAD) {
        LB_WARN("a process died holding the usage cache lock; recovered it");
        pthread_mutex_consistent(&lb_region->mutex.m);
        return 0;
    }
    if (r != 0)
        LB_ERROR("usage cache lock unusable (error %d); continuing without it", r);
    return r;
}

static void mutex_unlock(int locked_rc)
{
    if (locked_rc == 0)
        pthread_mutex_unlock(&lb_region->mutex.m);
    lb_guard_leave();
}

/* Reclaim slots whose owner died: their bytes come off the container totals. Caller holds the
 * mutex. *others = live slots other than ours. Returns how many were reclaimed. */
static int reclaim_locked(int *others)
{
    struct lb_region_slot *s = lb_region_slots(lb_region);
    uint32_t hwm = atomic_load(&lb_region->slot_hwm);
    int n = 0;
    *others = 0;
    check_fd();
    for (uint32_t i = 0; i < hwm && i < LB_REGION_MAX_SLOTS; i++) {
        if ((int)i == g_slot_idx || atomic_load(&s[i].state) != LB_SLOT_ACTIVE)
            continue;
        if (slot_alive((int)i)) {
            ++*others;
            continue;
        }
        LB_INFO("usage cache: reclaimed slot %u of dead pid %d", i, s[i].pid);
        for (int d = 0; d < LB_REGION_MAX_DEVICES; d++) {
            /* A dead owner cannot race with us on its own slot. */
            uint64_t u = atomic_exchange(&s[i].used[d], 0);
            if (u)
                atomic_fetch_sub(&lb_region->used_total[d], u);
        }
        s[i].pid = 0;
        s[i].hostpid = 0;
        atomic_store(&s[i].state, LB_SLOT_FREE);
        n++;
    }
    return n;
}

static int reclaim(void)
{
    int others, rc = mutex_lock();
    int n = reclaim_locked(&others);
    mutex_unlock(rc);
    return n;
}

/* Host pid: known for certain only in the initial PID namespace (its inode is fixed by the
 * kernel ABI, PROC_PID_INIT_INO). Elsewhere 0 = unknown; the monitor resolves it. */
static int32_t host_pid(void)
{
    char buf[64];
    ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
    if (n > 0) {
        buf[n] = '\0';
        if (strcmp(buf, "pid:[4026531836]") == 0)
            return (int32_t)getpid();
    }
    return 0;
}

struct lb_region_slot *lb_region_claim(void)
{
    lb_lock(&g_claim_lock);
    struct lb_region_slot *mine = atomic_load(&lb_region_slot);
    if (mine) {
        lb_unlock(&g_claim_lock);
        return mine;
    }
    struct lb_region_slot *s = lb_region_slots(lb_region);
    int others, rc = mutex_lock();
    reclaim_locked(&others);
    if (others == 0 && !(atomic_load(&lb_region->flags) & LB_FLAG_OVERFLOW_SEEN)) {
        /* Nobody else lives and we hold nothing yet (a process reserves only after claiming,
         * under this mutex): the totals must be 0. Repairs the over-count a process killed
         * between its two counter updates leaves behind. */
        for (int d = 0; d < LB_REGION_MAX_DEVICES; d++)
            atomic_store(&lb_region->used_total[d], 0);
    }
    /* A slot's lock is taken through a description of our own, or not at all: a forked child that
     * could not open one yet (its table was full at the fork) shares its parent's, and a lock
     * taken through it would read as no lock to the parent (a description never conflicts with
     * itself): the parent would reclaim the child's slot while both live. */
    int can_hold = g_fd >= 0 && g_fd_own;
    for (int i = 0; can_hold && i < LB_REGION_MAX_SLOTS; i++) {
        if (atomic_load(&s[i].state) != LB_SLOT_FREE)
            continue;
        if (lock_byte(F_OFD_SETLK, F_WRLCK, LB_REGION_LOCK_OFFSET + 1 + i) != 0)
            continue; /* someone alive holds it: not ours to take */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s[i].pid = (int32_t)getpid();
        s[i].hostpid = host_pid();
        s[i].claimed_at = (uint64_t)ts.tv_sec;
        /* What was charged while no slot could be held (below) is this slot's from now on. */
        for (int d = 0; d < LB_REGION_MAX_DEVICES; d++)
            atomic_store(&s[i].used[d], atomic_exchange(&g_overflow_slot.used[d], 0));
        atomic_store(&s[i].state, LB_SLOT_ACTIVE);
        uint32_t hwm = atomic_load(&lb_region->slot_hwm);
        while (hwm < (uint32_t)i + 1 && !atomic_compare_exchange_weak(&lb_region->slot_hwm, &hwm, (uint32_t)i + 1))
            ;
        g_slot_idx = i;
        mine = &s[i];
        break;
    }
    mutex_unlock(rc);
    if (!mine && !can_hold) {
        /* No description of our own to hold a slot's lock through (the descriptor table full, say):
         * charged to the process's own record, in the totals but in no slot, until a later call
         * claims one and takes them along. Nobody may take the totals for unused meanwhile. */
        static _Atomic int logged;
        if (!atomic_exchange(&logged, 1))
            LB_WARN("usage cache: no descriptor of %s could be opened to claim a process slot with (the "
                    "descriptor table full?); charging without a slot until one can be had",
                    g_path[0] ? g_path : "the private region");
        atomic_fetch_or(&lb_region->flags, LB_FLAG_OVERFLOW_SEEN);
        lb_unlock(&g_claim_lock);
        return &g_overflow_slot;
    }
    if (!mine) {
        LB_ERROR("usage cache: all %d process slots are taken; this process's memory counts in the container "
                 "totals but is not reclaimed if it dies", LB_REGION_MAX_SLOTS);
        atomic_fetch_or(&lb_region->flags, LB_FLAG_OVERFLOW_SEEN);
        mine = &g_overflow_slot;
    } else {
        LB_DEBUG("usage cache: slot %d, pid %d, host pid %d", g_slot_idx, mine->pid, mine->hostpid);
    }
    atomic_store(&lb_region_slot, mine);
    lb_unlock(&g_claim_lock);
    return mine;
}

/* Map g_fd as the region; create/stamp it if needed. Caller holds the creation lock. */
static struct lb_region_header *map_region(const struct lb_config *cfg, const char *path)
{
    struct stat st;
    if (fstat(g_fd, &st) != 0) {
        LB_ERROR("%s: fstat failed (errno %d)", path, errno);
        return NULL;
    }
    int fresh = st.st_size == 0;
    if (fresh && ftruncate(g_fd, LB_REGION_FILE_SIZE) != 0) {
        LB_ERROR("%s: cannot size the region (errno %d)", path, errno);
        return NULL;
    }
    if (st.st_size != 0 && st.st_size != (off_t)LB_REGION_FILE_SIZE) {
        uint64_t magic = 0;
        if (pread(g_fd, &magic, sizeof magic, 0) != (ssize_t)sizeof magic)
            magic = 0;
        LB_ERROR("%s: not a limitbed v%u usage cache (size %lld, expected %u; first bytes 0x%llx%s)", path,
                 LB_REGION_VERSION, (long long)st.st_size, LB_REGION_FILE_SIZE, (unsigned long long)magic,
                 (uint32_t)magic == 19920718u ? ", an upstream HAMi-core region" : "");
        return NULL;
    }
    void *p = mmap(NULL, LB_REGION_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, g_fd, 0);
    if (p == MAP_FAILED) {
        LB_ERROR("%s: mmap failed (errno %d)", path, errno);
        return NULL;
    }
    struct lb_region_header *h = p;
    uint64_t magic = atomic_load_explicit(&h->magic, memory_order_acquire);
    if (magic == 0) {
        /* New, or its creator died before finishing: nobody attached to it (attaching needs the
         * magic, checked under the creation lock we hold), so it is ours to stamp. */
        lb_region_stamp(h, cfg, fresh);
        LB_INFO("%s: created; limits stamped by this process", path);
        return h;
    }
    if (magic != LB_REGION_MAGIC || h->version != LB_REGION_VERSION || h->file_size != LB_REGION_FILE_SIZE ||
        h->header_size != LB_REGION_HEADER_SIZE || h->slot_size != LB_REGION_SLOT_SIZE ||
        h->max_slots != LB_REGION_MAX_SLOTS || h->max_devices != LB_REGION_MAX_DEVICES ||
        h->lock_offset != LB_REGION_LOCK_OFFSET) {
        LB_ERROR("%s: magic/version/layout mismatch (magic 0x%llx, version %u; expected version %u)", path,
                 (unsigned long long)magic, h->version, LB_REGION_VERSION);
        munmap(p, LB_REGION_FILE_SIZE);
        return NULL;
    }
    lb_region_compare(h, cfg, path);
    return h;
}

static struct lb_region_header *attach(const struct lb_config *cfg, const char *path)
{
    if (adopt(g_fd, 0) != 0 || lock_byte(F_OFD_SETLKW, F_WRLCK, LB_REGION_LOCK_OFFSET) != 0) {
        LB_ERROR("%s: cannot take the creation lock (errno %d)", path, errno);
        return NULL;
    }
    struct lb_region_header *h = map_region(cfg, path);
    lock_byte(F_OFD_SETLK, F_UNLCK, LB_REGION_LOCK_OFFSET);
    return h;
}

/* An error that says the process, not the file, is the problem (its descriptor table, memory):
 * a private region would let N such processes hold N x the limit, so there is none. */
static int transient(int err) { return err == EMFILE || err == ENFILE || err == ENOMEM || err == EINTR; }

void lb_region_init(const struct lb_config *cfg)
{
    memcpy(lb_own_limit, cfg->mem_limit, sizeof lb_own_limit);
    if (cfg->unusable[0]) {
        lb_region_refusal = cfg->unusable; /* the limits file cannot be read: nothing to stamp or to join */
        return;
    }
    const char *path = cfg->cache_path;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd >= 0) {
        fchmod(fd, 0666); /* every process of the pod shares it, whatever its uid; umask untouched */
    } else if (errno == EEXIST) {
        fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    }
    if (fd < 0 && transient(errno)) {
        static char why[512];
        lb_fmt(why, sizeof why, "%s: cannot be opened (%s): start the process with descriptors and memory to spare",
               path, strerror(errno));
        lb_region_refusal = why;
        LB_ERROR("%s", why);
        return;
    }
    if (fd >= 0) {
        g_fd = fd;
        lb_fmt(g_path, sizeof g_path, "%s", path);
        lb_region = attach(cfg, path);
        if (!lb_region) {
            close(fd);
            g_fd = -1;
        }
    } else {
        LB_ERROR("%s: cannot open the usage cache (errno %d)", path, errno);
    }
    if (!lb_region) {
        /* Never crash, never run uncapped: enforce this process's own limits in a private region
         * (a memfd, so fcntl slot locks and fork children work the same way). */
        LB_ERROR("enforcing this process's own limits without the shared usage cache; other processes of the "
                 "pod are not counted");
        g_fd = memfd_create("limitbed-usage", MFD_CLOEXEC);
        g_path[0] = '\0';
        if (g_fd >= 0)
            lb_region = attach(cfg, "private usage region");
        if (!lb_region) {
            /* Last resort: anonymous memory, no liveness (only this process uses it). */
            if (g_fd >= 0)
                close(g_fd);
            g_fd = -1;
            void *p = mmap(NULL, LB_REGION_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
            if (p != MAP_FAILED) {
                lb_region = p;
                lb_region_stamp(lb_region, cfg, 1); /* anonymous memory is zero-filled */
            }
        }
    } else {
        LB_DEBUG("%s: attached", path);
    }
    if (!lb_region) {
        lb_region_refusal = "no usage region could be attached (not even a private one)";
        return;
    }
    lb_region_mine(); /* join the pod's accounting now: the monitor sees the process from its first call */
}

/* fork: the claim lock is held across it, so the child never inherits it locked by a thread
 * that does not exist there. The child has no slot until it claims one, and shares its parent's
 * description (and through it the parent's lock) until it maps the region through one of its
 * own: then its slot lock is its own, and the parent's ends with the parent. When that fails the
 * child keeps sharing it: both read as alive while either lives (an over-count, never an
 * under-count). */
static void own_description(void)
{
    if (!lb_region || g_fd < 0)
        return;
    int mine = fd_ours(), fd = reopen(1);
    if (fd < 0)
        return;
    if (mine)
        close(g_fd); /* the child's copy of the parent's descriptor */
    g_fd = fd;
    g_fd_own = 1;
}
static void fork_prepare(void) { pthread_mutex_lock(&g_claim_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&g_claim_lock); }
#ifdef LB_UNIT_TEST
/* The child handler's work without the lock the forking thread holds: the unit tests call it in a
 * child they forked themselves. Not part of libvgpu.so. */
void lb_region_after_fork(void)
{
    atomic_store(&lb_region_slot, NULL);
    g_slot_idx = -1;
    g_fd_own = g_fd < 0;
    own_description();
    pthread_mutex_init(&g_claim_lock, NULL);
}
#endif
/* The forking thread holds the claim lock (prepare): in the child it is that thread's to unlock. */
static void fork_child(void)
{
    atomic_store(&lb_region_slot, NULL);
    g_slot_idx = -1;
    g_fd_own = g_fd < 0;
    own_description();
    pthread_mutex_unlock(&g_claim_lock);
}
static void __attribute__((constructor(101))) region_register_fork(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

int lb_region_reserve_retry(int dev, uint64_t bytes)
{
    struct lb_region_slot *s = lb_region_mine();
    uint64_t lim = lb_region_limit_of(dev);
    for (int attempt = 0;; attempt++) {
        if (bytes <= lim) {
            uint64_t t = lb_region_add(s, dev, bytes);
            if (t <= lim && t >= bytes)
                return 1;
            lb_region_sub(s, dev, bytes);
        }
        /* Over the limit: memory charged to dead processes may be what is in the way. */
        if (bytes > lim || attempt > 0 || reclaim() == 0)
            return 0;
    }
}
