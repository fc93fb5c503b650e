#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "state.h"

_Static_assert(sizeof(fg_shared) < (1u << 31), "the size field is 32-bit");

static int fail(char *err, size_t errlen, const char *path, const char *what) {
    snprintf(err, errlen, "state file %s: %s", path, what);
    return -1;
}

static int init_shared(fg_shared *sh, uint64_t identity, unsigned nunits) {
    pthread_mutexattr_t a;
    if (pthread_mutexattr_init(&a) || pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) ||
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) || pthread_mutex_init(&sh->mutex, &a))
        return -1;
    pthread_mutexattr_destroy(&a);
    sh->version = FG_STATE_VERSION;
    sh->size = (uint32_t)sizeof *sh;
    sh->identity = identity;
    sh->nunits = nunits;
    for (unsigned u = 0; u < FG_MAX_UNITS; u++)
        sh->unit[u].cur = -1;
    /* The magic goes last: a reader that sees it sees an initialised struct. */
    __atomic_store_n(&sh->magic, FG_STATE_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

/* Where our description's file position is parked: from this attachment's address, so that
 * another description of the file (libnvidia-ml's next to libcuda's, or a fresh one of the
 * program's, at 0) does not look like ours. Between 1 and 2 GiB: every file system seeks there.
 * Nothing reads or writes through the descriptor; only fcntl and mmap use it. */
static off_t mark(const fg_state *st) { return (off_t)((1u << 30) | (((uintptr_t)st >> 4) & ((1u << 30) - 1))); }

/* Our descriptor still names our description: the program may have closed it, or put a file
 * of its own on its number. */
static int fd_ours(const fg_state *st) {
    struct stat sb;
    return st->fd >= 0 && fstat(st->fd, &sb) == 0 && sb.st_dev == st->dev && sb.st_ino == st->ino &&
           lseek(st->fd, 0, SEEK_CUR) == mark(st);
}

/* Opens the state file again (the old number is left alone: it is no longer ours). pin: map it
 * through the new description too, which keeps that description — and the locks taken through
 * it — for as long as the process lives, whatever becomes of the descriptor; the description
 * the old mapping held is let go. 0 or -1 (the file is gone or replaced: no longer our device). */
static int reopen(fg_state *st, int pin) {
    int fd = open(st->path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_dev != st->dev || sb.st_ino != st->ino || lseek(fd, mark(st), SEEK_SET) < 0 ||
        (pin && mmap(st->sh, sizeof *st->sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)) {
        close(fd);
        return -1;
    }
    st->fd = fd;
    return 0;
}

/* The engines' part in the lock (timeline.c registers it when the library is loaded): without it
 * nobody's queued work would be run or reaped, so no state is attached (fail closed). */
static const fg_state_engine_ops *engine;

void fg_state_set_engine(const fg_state_engine_ops *ops) { engine = ops; }

int fg_state_attach(fg_state *st, const char *path, uint64_t identity, unsigned nunits, char *err, size_t errlen) {
    char msg[300];
    /* A re-attach keeps the side file open: closing it would drop this process's classic locks. */
    int pids_fd = st->pids_open ? st->pids_fd : -1, pids_open = st->pids_open;
    dev_t pids_dev = st->pids_dev;
    ino_t pids_ino = st->pids_ino;
    memset(st, 0, sizeof *st);
    st->fd = -1, st->slot = -1, st->pids_fd = pids_fd, st->pids_open = pids_open;
    st->pids_dev = pids_dev, st->pids_ino = pids_ino;
    fg_copy(st->path, sizeof st->path, path);
    if (!engine) /* the engines' hooks are registered at load: none is an internal error */
        return snprintf(err, errlen, "state file %s: no engine registered (internal)", path), -1;
    char dir[sizeof st->path];
    fg_copy(dir, sizeof dir, path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        /* mkdir -p; new directories are shared by every user and container of the host, like /tmp */
        for (char *c = dir + 1;; c++) {
            if (*c != '/' && *c != 0)
                continue;
            char saved = *c;
            *c = 0;
            if (mkdir(dir, 0777) == 0)
                chmod(dir, 01777);
            *c = saved;
            if (!saved)
                break;
        }
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        snprintf(msg, sizeof msg, "cannot open: %s (set FAKEGPU_STATE_DIR to a writable directory)", strerror(errno));
        return fail(err, errlen, path, msg);
    }
    (void)fchmod(fd, 0666); /* best effort: the creator's umask must not lock other users out */
    /* flock serialises creation; it is independent of the OFD byte locks used for liveness. */
    struct stat sb;
    if (flock(fd, LOCK_EX) != 0 || fstat(fd, &sb) != 0) {
        close(fd);
        return fail(err, errlen, path, "cannot lock or stat it");
    }
    int fresh = sb.st_size == 0;
    if (fresh && ftruncate(fd, (off_t)sizeof(fg_shared)) != 0) {
        flock(fd, LOCK_UN), close(fd);
        return fail(err, errlen, path, "cannot size it (disk full?)");
    }
    if (!fresh && sb.st_size != (off_t)sizeof(fg_shared)) {
        flock(fd, LOCK_UN), close(fd);
        snprintf(msg, sizeof msg,
                 "size %lld, this fakegpu build uses %zu: it was made by another build; delete it while no GPU process runs",
                 (long long)sb.st_size, sizeof(fg_shared));
        return fail(err, errlen, path, msg);
    }
    fg_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (sh == MAP_FAILED) {
        flock(fd, LOCK_UN), close(fd);
        return fail(err, errlen, path, "cannot map it");
    }
    const char *bad = NULL;
    /* No magic under our flock: new, or its creator died half-way; either way (re)initialise. */
    if (__atomic_load_n(&sh->magic, __ATOMIC_ACQUIRE) != FG_STATE_MAGIC) {
        if (!fresh && sh->magic != 0)
            bad = "bad magic: not a fakegpu state file; delete it while no GPU process runs";
        else if (init_shared(sh, identity, nunits) != 0)
            bad = "cannot initialise its mutex";
    } else if (sh->version != FG_STATE_VERSION || sh->size != sizeof *sh) {
        bad = "written by another fakegpu version; delete it while no GPU process runs";
    } else if (sh->identity != identity || sh->nunits != nunits) {
        bad = "belongs to a different profile (same name, other devices); delete it or use another FAKEGPU_STATE_DIR";
    }
    flock(fd, LOCK_UN);
    if (bad) {
        munmap(sh, sizeof *sh), close(fd);
        return fail(err, errlen, path, bad);
    }
    st->sh = sh, st->fd = fd, st->pid = getpid(), st->dev = sb.st_dev, st->ino = sb.st_ino;
    (void)lseek(fd, mark(st), SEEK_SET); /* cannot fail on a regular file; if it did, the next use reopens */
    return 0;
}

void fg_state_detach(fg_state *st) {
    if (st->sh)
        munmap(st->sh, sizeof *st->sh);
    if (fd_ours(st))
        close(st->fd); /* with the mapping gone, this drops our liveness lock: our slot reads as dead */
    st->sh = NULL, st->fd = -1, st->slot = -1; /* pids_fd stays open: see state.h */
}

void fg_state_after_fork(fg_state *st) {
    if (!st->sh)
        return; /* not attached (a fork before cuInit): there is no descriptor of ours to touch */
    /* The inherited descriptor and mapping share the parent's description and its lock; ours
     * must be our own, and the parent's must not live on in us. */
    if (fd_ours(st))
        close(st->fd); /* the child's copy: the parent's stays open */
    st->fd = -1, st->slot = -1, st->pid = getpid();
    memset(st->chan, 0, sizeof st->chan); /* the parent's queues and record stay the parent's */
    st->acct = 0;
    if (reopen(st, 1) != 0) {
        munmap(st->sh, sizeof *st->sh); /* never keep the parent's description: no device in this child */
        st->sh = NULL;
    }
}

static int byte_lock(int fd, int cmd, short type, int slot, struct flock *fl) {
    memset(fl, 0, sizeof *fl);
    fl->l_type = type;
    fl->l_whence = SEEK_SET;
    fl->l_start = FG_LOCK_OFFSET + slot;
    fl->l_len = 1;
    return fcntl(fd, cmd, fl);
}

static int mine(const fg_state *st, int i) { return i >= 0 && i == st->slot && st->pid == getpid(); }

static int holds(const fg_shared_alloc *a, int slot) { return (a->holders[slot / 64] >> (slot % 64)) & 1; }

/* A slot lets go of every shared allocation; those it held last are freed with it. */
static void unhold_all(fg_state *st, int slot) {
    for (int j = 0; j < FG_MAX_SHARED; j++) {
        fg_shared_alloc *a = &st->sh->share[j];
        if (!a->id || !holds(a, slot))
            continue;
        a->holders[slot / 64] &= ~(1ULL << (slot % 64));
        int any = 0;
        for (int k = 0; k < FG_MAX_SLOTS / 64; k++)
            any |= a->holders[k] != 0;
        if (!any)
            memset(a, 0, sizeof *a);
    }
}

/* The side file of classic locks, opened on first use and kept (state.h). -1 when it cannot be. */
static int pids_file(fg_state *st) {
    struct stat sb;
    if (st->pids_open && fstat(st->pids_fd, &sb) == 0 && sb.st_dev == st->pids_dev && sb.st_ino == st->pids_ino)
        return st->pids_fd;
    st->pids_open = 0; /* the program closed it or put a file of its own on its number: left alone */
    char path[sizeof st->path + 8];
    snprintf(path, sizeof path, "%s.pids", st->path);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return -1; /* tried again next time */
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return -1;
    }
    (void)fchmod(fd, 0666); /* every user and container of the host shares it, as the state */
    st->pids_open = 1, st->pids_dev = sb.st_dev, st->pids_ino = sb.st_ino;
    return st->pids_fd = fd;
}

int32_t fg_state_slot_pid(fg_state *st, int slot) {
    int32_t recorded = st->sh->slot[slot].pid;
    int fd = pids_file(st);
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK, fl.l_whence = SEEK_SET, fl.l_start = slot, fl.l_len = 1;
    if (fd < 0 || fcntl(fd, F_GETLK, &fl) != 0 || fl.l_type == F_UNLCK || fl.l_pid <= 0)
        return recorded; /* our own lock (never reported to us), none taken, or not visible here */
    return (int32_t)fl.l_pid;
}

/* A dead owner's slot is cleared outside the scan, which every lock runs over all slots. */
static __attribute__((noinline)) void reap_slot(fg_state *st, int i) {
    memset(&st->sh->slot[i], 0, sizeof st->sh->slot[i]); /* its owner is gone: so is its memory */
    unhold_all(st, i);                                    /* its holds on shared allocations */
    engine->slot_gone(st->sh, i);                         /* and its queued work */
}

static void reap(fg_state *st) {
    for (int i = 0; i < FG_MAX_SLOTS; i++) {
        if (!st->sh->slot[i].in_use || mine(st, i))
            continue;
        struct flock fl;
        if (byte_lock(st->fd, F_OFD_GETLK, F_WRLCK, i, &fl) == 0 && fl.l_type == F_UNLCK)
            reap_slot(st, i);
    }
}

int fg_state_lock(fg_state *st) {
    if (st->sh && st->pid != getpid())
        fg_state_after_fork(st); /* forked without our atfork handler (raw clone, _Fork) */
    if (!st->sh)
        return -1;
    int rc = pthread_mutex_lock(&st->sh->mutex);
    if (rc == EOWNERDEAD) {
        /* The owner died inside a critical section. Of the memory accounting it can only have
         * left its own slot's numbers half updated, and reap() drops that slot because its lock is
         * gone. The engines' timeline it may have been advancing for everyone: their queues'
         * bookkeeping is rebuilt from the queued kernels (a half-credited step stays half credited
         * in the work records: at most one step's worth). */
        pthread_mutex_consistent(&st->sh->mutex);
        engine->repair(st->sh);
        rc = 0;
    }
    if (rc != 0)
        return -1;
    /* The program closed our descriptor or reused its number: reap must not ask a file of the
     * program's who lives. While we hold a slot the old mapping keeps our lock: leave it. When
     * no descriptor can be had (the program took them all), the state is still ours to update
     * through the mapping — a free must not be lost — but nobody is reaped and no slot taken. */
    if (fd_ours(st) || reopen(st, !mine(st, st->slot)) == 0)
        reap(st);
    /* Dead processes' work is gone first (their queues die with them), then the engines with work
     * catch up. An idle engine's timeline has nothing to add (its busy intervals are all there),
     * so the clock is read only when some engine has work: a memory call pays nothing for it. */
    unsigned n = st->sh->nunits < FG_MAX_UNITS ? st->sh->nunits : FG_MAX_UNITS, busy = 0;
    for (unsigned u = 0; u < n; u++)
        busy |= st->sh->unit[u].active;
    if (busy) {
        uint64_t now = fg_state_clock(st);
        for (unsigned u = 0; u < n; u++)
            engine->advance(st->sh, u, now);
    }
    return 0;
}

uint64_t fg_state_clock(const fg_state *st) { return st->clock ? st->clock() : fg_now_ns(); }


void fg_state_unlock(fg_state *st) { pthread_mutex_unlock(&st->sh->mutex); }

int fg_state_own_slot(fg_state *st) {
    if (mine(st, st->slot))
        return st->slot;
    if (!fd_ours(st))
        return -1; /* no descriptor of ours to lock a slot through (fg_state_lock could not reopen one) */
    for (int i = 0; i < FG_MAX_SLOTS; i++) {
        fg_slot *s = &st->sh->slot[i];
        struct flock fl;
        if (s->in_use || byte_lock(st->fd, F_OFD_SETLK, F_WRLCK, i, &fl) != 0)
            continue;
        memset(s, 0, sizeof *s);
        s->in_use = 1;
        s->pid = (int32_t)getpid();
        st->slot = i, st->pid = getpid();
        /* Under the state mutex, so no reader sees the slot before its PID lock. Best effort: without
         * it readers get the recorded PID. */
        int pfd = pids_file(st);
        if (pfd >= 0) {
            struct flock pl;
            memset(&pl, 0, sizeof pl);
            pl.l_type = F_WRLCK, pl.l_whence = SEEK_SET, pl.l_start = i, pl.l_len = 1;
            (void)fcntl(pfd, F_SETLK, &pl);
        }
        return i;
    }
    return -1;
}

uint64_t fg_state_unit_used(const fg_state *st, unsigned unit) {
    uint64_t sum = 0;
    for (int i = 0; i < FG_MAX_SLOTS; i++)
        if (st->sh->slot[i].in_use)
            sum += st->sh->slot[i].used[unit] + st->sh->slot[i].ctx[unit];
    for (int j = 0; j < FG_MAX_SHARED; j++)
        if (st->sh->share[j].id && st->sh->share[j].unit == unit)
            sum += st->sh->share[j].bytes;
    return sum;
}

int fg_state_share(fg_state *st, unsigned unit, uint64_t bytes, uint32_t kind) {
    if (unit >= FG_MAX_UNITS || !mine(st, st->slot))
        return -1;
    for (int j = 0; j < FG_MAX_SHARED; j++) {
        fg_shared_alloc *a = &st->sh->share[j];
        if (a->id)
            continue;
        uint64_t *v = &st->sh->slot[st->slot].used[unit];
        *v = *v > bytes ? *v - bytes : 0;
        memset(a, 0, sizeof *a);
        a->id = ++st->sh->next_share_id;
        /* Not a secret (any process of the host may read the state file); it only keeps a
         * stale or made-up handle from naming a live entry by accident. */
        a->nonce = (fg_now_ns() * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)getpid() << 32) ^ a->id;
        a->bytes = bytes, a->unit = unit, a->kind = kind;
        a->holders[st->slot / 64] |= 1ULL << (st->slot % 64);
        return j;
    }
    return -1;
}

int fg_state_share_hold(fg_state *st, uint64_t id, uint64_t nonce) {
    int s = fg_state_own_slot(st);
    for (int j = 0; s >= 0 && id && j < FG_MAX_SHARED; j++) {
        fg_shared_alloc *a = &st->sh->share[j];
        if (a->id != id || a->nonce != nonce)
            continue;
        a->holders[s / 64] |= 1ULL << (s % 64);
        return j;
    }
    return -1;
}

void fg_state_share_drop(fg_state *st, uint64_t id) {
    if (!mine(st, st->slot))
        return;
    for (int j = 0; id && j < FG_MAX_SHARED; j++) {
        fg_shared_alloc *a = &st->sh->share[j];
        if (a->id != id || !holds(a, st->slot))
            continue;
        a->holders[st->slot / 64] &= ~(1ULL << (st->slot % 64));
        int any = 0;
        for (int k = 0; k < FG_MAX_SLOTS / 64; k++)
            any |= a->holders[k] != 0;
        if (!any)
            memset(a, 0, sizeof *a);
        return;
    }
}

int fg_state_charge(fg_state *st, unsigned unit, uint64_t bytes, uint64_t limit, int is_ctx) {
    if (unit >= FG_MAX_UNITS)
        return -1;
    int s = fg_state_own_slot(st);
    if (s < 0)
        return -2;
    uint64_t used = fg_state_unit_used(st, unit);
    if (used > limit || bytes > limit - used)
        return -1;
    fg_slot *sl = &st->sh->slot[s];
    (is_ctx ? sl->ctx : sl->used)[unit] += bytes;
    return 0;
}

void fg_state_release(fg_state *st, unsigned unit, uint64_t bytes, int is_ctx) {
    if (unit >= FG_MAX_UNITS || !mine(st, st->slot))
        return;
    uint64_t *v = &(is_ctx ? st->sh->slot[st->slot].ctx : st->sh->slot[st->slot].used)[unit];
    *v = *v > bytes ? *v - bytes : 0;
}

uint64_t fg_state_busy_ns(const fg_state *st, unsigned unit, int32_t pid, uint64_t now, uint64_t window) {
    const fg_unit *u = &st->sh->unit[unit];
    uint64_t from = now > window ? now - window : 0, busy = 0;
    for (uint32_t i = 0; i < u->count; i++) {
        const fg_busy *b = &u->ring[i];
        if (pid && b->pid != pid)
            continue;
        uint64_t s = b->start > from ? b->start : from, e = b->end < now ? b->end : now;
        if (e > s)
            busy += e - s;
    }
    return busy;
}

/* The power the unit drew over the last window: busy ns weighted by their kernels' power (one
 * division at the end: this runs under the state lock at every launch). */
static uint64_t power_ns(const fg_state *st, unsigned unit, uint64_t now, uint64_t window) {
    const fg_unit *u = &st->sh->unit[unit];
    uint64_t from = now > window ? now - window : 0, full = 0, part = 0;
    for (uint32_t i = 0; i < u->count; i++) {
        const fg_busy *b = &u->ring[i];
        uint64_t s = b->start > from ? b->start : from, e = b->end < now ? b->end : now;
        if (e <= s)
            continue;
        if (b->power == 0 || b->power >= 100)
            full += e - s;
        else
            part += (e - s) * b->power;
    }
    return full + part / 100;
}

uint64_t fg_state_speed(const fg_state *st, unsigned unit, uint64_t now, uint64_t boost) {
    if (boost <= 100)
        return 100;
    uint64_t busy = power_ns(st, unit, now, FG_POWER_WINDOW_NS);
    return busy * boost > FG_POWER_WINDOW_NS * 100 ? FG_POWER_WINDOW_NS * 100 / busy : boost;
}

unsigned fg_state_util(const fg_state *st, unsigned unit, int32_t pid, uint64_t now, uint64_t window) {
    uint64_t pct = (fg_state_busy_ns(st, unit, pid, now, window) * 100 + window / 2) / window;
    return pct > 100 ? 100 : (unsigned)pct;
}
