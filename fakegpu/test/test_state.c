/* The shared state: attach checks, accounting across processes, reclaim of a killed process,
 * robust-mutex recovery, fork slots, a program that closes our descriptors and the utilisation
 * arithmetic. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "state.h"

#define MiB (1024ULL * 1024ULL)

static void path(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", fg_test_dir(), name); }

static uint64_t used(fg_state *st, unsigned unit) {
    if (fg_state_lock(st) != 0)
        return ~0ULL;
    uint64_t u = fg_state_unit_used(st, unit);
    fg_state_unlock(st);
    return u;
}

static int charge(fg_state *st, unsigned unit, uint64_t b, uint64_t limit) {
    if (fg_state_lock(st) != 0)
        return -9;
    int rc = fg_state_charge(st, unit, b, limit, 0);
    fg_state_unlock(st);
    return rc;
}

static void attach_checks(void) {
    char p[300], err[512];
    fg_state a, b;
    path(p, sizeof p, "sub/dir/a.state"); /* the directory is created */
    CHECK_MSG(fg_state_attach(&a, p, 42, 2, err, sizeof err) == 0, "%s", err);
    CHECK(fg_state_attach(&b, p, 43, 2, err, sizeof err) == -1 && strstr(err, "different profile"));
    fg_state_detach(&a);

    path(p, sizeof p, "short.state");
    int fd = open(p, O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0 && write(fd, "xxxx", 4) == 4);
    close(fd);
    CHECK(fg_state_attach(&a, p, 42, 2, err, sizeof err) == -1 && strstr(err, "made by another build"));

    path(p, sizeof p, "nomagic.state");
    fd = open(p, O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)sizeof(fg_shared)) == 0 && pwrite(fd, "garbage!", 8, 0) == 8);
    close(fd);
    CHECK(fg_state_attach(&a, p, 42, 2, err, sizeof err) == -1 && strstr(err, "bad magic"));

    CHECK(fg_state_attach(&a, "/proc/nope/x.state", 42, 2, err, sizeof err) == -1 && strstr(err, "FAKEGPU_STATE_DIR"));
}

static void accounting(void) {
    char p[300], err[512];
    fg_state a, b;
    path(p, sizeof p, "acct.state");
    CHECK(fg_state_attach(&a, p, 1, 2, err, sizeof err) == 0);
    CHECK(fg_state_attach(&b, p, 1, 2, err, sizeof err) == 0); /* a second descriptor, like libnvidia-ml's */
    CHECK(charge(&a, 0, 600 * MiB, 1000 * MiB) == 0);
    CHECK(charge(&a, 0, 500 * MiB, 1000 * MiB) == -1); /* would exceed the device */
    CHECK(charge(&a, 1, 500 * MiB, 1000 * MiB) == 0);  /* other unit, own budget */
    CHECK(used(&b, 0) == 600 * MiB);                   /* b's reap must not take a's live slot */
    CHECK(used(&a, 0) == 600 * MiB);
    fg_state_lock(&a);
    fg_state_release(&a, 0, 100 * MiB, 0);
    fg_state_unlock(&a);
    CHECK(used(&b, 0) == 500 * MiB);

    /* Another process charges, then is SIGKILLed: its memory comes back on the next lock. */
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        fg_state c;
        char e[256];
        int ok = fg_state_attach(&c, p, 1, 2, e, sizeof e) == 0 && charge(&c, 0, 300 * MiB, 1000 * MiB) == 0;
        if (write(ready[1], ok ? "y" : "n", 1) != 1)
            _exit(2);
        pause();
        _exit(0);
    }
    char c = 0;
    CHECK(read(ready[0], &c, 1) == 1 && c == 'y');
    CHECK(used(&b, 0) == 800 * MiB);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CHECK(used(&b, 0) == 500 * MiB);

    /* A process that dies holding the mutex: the next locker recovers it (EOWNERDEAD). */
    pid = fork();
    if (pid == 0) {
        fg_state c;
        char e[256];
        if (fg_state_attach(&c, p, 1, 2, e, sizeof e) != 0 || charge(&c, 0, 100 * MiB, 1000 * MiB) != 0)
            _exit(2);
        fg_state_lock(&c);
        _exit(0); /* still holding it */
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(used(&a, 0) == 500 * MiB); /* lock recovered, and the dead process's 100 MiB reclaimed */

    /* fork without exec: the child takes its own slot, and the parent's stays the parent's. */
    pid = fork();
    if (pid == 0) {
        fg_state_after_fork(&a);
        int bad = charge(&a, 0, 200 * MiB, 1000 * MiB) != 0;
        fg_state_lock(&a);
        int mine = fg_state_own_slot(&a);
        bad |= a.sh->slot[mine].pid != getpid() || fg_state_unit_used(&a, 0) != 700 * MiB;
        fg_state_unlock(&a);
        _exit(bad);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(used(&a, 0) == 500 * MiB); /* the exited child's 200 MiB are gone with it */

    fg_state_detach(&a);
    CHECK(used(&b, 0) == 0); /* a detached: its slot reads as dead */
    fg_state_detach(&b);
}

/* No lock of anyone on the file behind fd, asked through a descriptor of our own. */
static int unlocked(int fd) {
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    int probe = open(p, O_RDONLY);
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    int ok = probe >= 0 && fcntl(probe, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK;
    if (probe >= 0)
        close(probe);
    return ok;
}

/* fd still open on the file `ino` names. */
static int same_file(int fd, ino_t ino) {
    struct stat sb;
    return fstat(fd, &sb) == 0 && sb.st_ino == ino;
}

/* A child that attaches, charges mib on unit 0 and waits: returns its pid; *go is its command pipe. */
static pid_t neighbour(const char *p, uint64_t mib, int *go) {
    int ready[2], cmd[2];
    if (pipe(ready) != 0 || pipe(cmd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        fg_state c;
        char e[256], x = 0;
        close(ready[0]), close(cmd[1]); /* the command pipe ends when the test closes its end */
        int ok = fg_state_attach(&c, p, 4, 2, e, sizeof e) == 0 && charge(&c, 0, mib * MiB, 4000 * MiB) == 0;
        if (write(ready[1], ok ? "y" : "n", 1) != 1)
            _exit(2);
        while (read(cmd[0], &x, 1) == 1) { /* each byte: report what the device holds */
            uint64_t u = used(&c, 0) / MiB;
            if (write(ready[1], &u, sizeof u) != (ssize_t)sizeof u)
                _exit(2);
        }
        _exit(0);
    }
    close(ready[1]), close(cmd[0]);
    char c = 0;
    if (read(ready[0], &c, 1) != 1 || c != 'y')
        return -1;
    go[0] = ready[0], go[1] = cmd[1];
    return pid;
}

/* What the neighbour sees on unit 0, in MiB. */
static uint64_t seen_by(const int *go) {
    uint64_t u = ~0ULL;
    if (write(go[1], "?", 1) != 1 || read(go[0], &u, sizeof u) != (ssize_t)sizeof u)
        return ~0ULL;
    return u;
}

/* A forked child takes its own slot, then closes every descriptor above 2 (closefrom): the
 * neighbour (go) sees its charge while it lives, and not after. */
static void child_closes_its_descriptors(fg_state *a, const char *other, int go[2]) {
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t c = fork();
    if (c == 0) {
        fg_state_after_fork(a);
        int ok = charge(a, 0, 50 * MiB, 4000 * MiB) == 0;
        int keep = dup2(ready[1], 900);
        close_range(3, 899, 0);
        int again = open(other, O_RDONLY); /* the program's file on the numbers we had */
        ok &= used(a, 0) == 650 * MiB && again >= 0 && unlocked(again);
        if (write(keep, ok ? "y" : "n", 1) != 1)
            _exit(2);
        pause();
        _exit(0);
    }
    close(ready[1]);
    char r = 0;
    CHECK(read(ready[0], &r, 1) == 1 && r == 'y');
    close(ready[0]);
    CHECK_MSG(seen_by(go) == 650, "a child that closed its descriptors: the neighbour sees %llu MiB, want 650",
              (unsigned long long)seen_by(go));
    kill(c, SIGKILL);
    waitpid(c, NULL, 0);
    CHECK(seen_by(go) == 600); /* and its memory goes with it */
}

/* A parent that dies while the child it forked lives: the parent's memory is reclaimed. */
static void parent_dies_child_lives(const char *p, int go[2]) {
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t parent = fork();
    if (parent == 0) {
        fg_state d;
        char e[256];
        if (fg_state_attach(&d, p, 4, 2, e, sizeof e) != 0 || charge(&d, 0, 70 * MiB, 4000 * MiB) != 0)
            _exit(2);
        if (fork() == 0) {
            fg_state_after_fork(&d);
            pid_t me = getpid();
            if (write(ready[1], &me, sizeof me) != (ssize_t)sizeof me)
                _exit(2);
            pause(); /* killed below */
            _exit(0);
        }
        _exit(0);
    }
    close(ready[1]);
    pid_t grandchild = 0;
    CHECK(read(ready[0], &grandchild, sizeof grandchild) == (ssize_t)sizeof grandchild && grandchild > 0);
    close(ready[0]);
    int status;
    waitpid(parent, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_MSG(seen_by(go) == 600, "a dead parent's 70 MiB live on in its child: the neighbour sees %llu MiB, want 600",
              (unsigned long long)seen_by(go));
    if (grandchild > 0)
        kill(grandchild, SIGKILL); /* not ours to wait for: init reaps it */
}

/* The program closes our descriptor (closefrom, a double close, dup2 over it) and opens its own
 * files at that number: we never lock, close or read through its file, a neighbour's memory is
 * never taken for dead, and our own slot stays alive — in the process that attached and in a
 * forked child. A parent that dies leaves no liveness behind in its children. */
static void program_closes_descriptors(void) {
    char p[300], other[300], err[512];
    fg_state a;
    path(p, sizeof p, "fds.state");
    path(other, sizeof other, "program-file");
    CHECK(fg_state_attach(&a, p, 4, 2, err, sizeof err) == 0);
    CHECK(charge(&a, 0, 300 * MiB, 4000 * MiB) == 0);
    int go[2] = {-1, -1};
    pid_t n = neighbour(p, 200, go);
    CHECK(n > 0 && seen_by(go) == 500);

    /* The program's own file lands on our number. */
    int mine = open(other, O_RDWR | O_CREAT, 0600);
    struct stat sb;
    CHECK(mine >= 0 && fstat(mine, &sb) == 0);
    int was = a.fd;
    CHECK(dup2(mine, was) == was);
    close(mine);
    CHECK_MSG(used(&a, 0) == 500 * MiB, "after the program took fd %d: %llu MiB, want 500 (the neighbour's 200 taken "
              "for dead through its file?)", was, (unsigned long long)(used(&a, 0) / MiB));
    CHECK(charge(&a, 0, 100 * MiB, 4000 * MiB) == 0);
    CHECK(seen_by(go) == 600); /* ours still lives for the neighbour */
    CHECK_MSG(same_file(was, sb.st_ino) && unlocked(was), "the program's fd %d was closed or locked", was);
    CHECK(lseek(was, 0, SEEK_CUR) == 0);

    child_closes_its_descriptors(&a, other, go);
    parent_dies_child_lives(p, go);

    fg_state_detach(&a);
    CHECK(same_file(was, sb.st_ino)); /* detach closes only what it opened */
    close(was);
    close(go[1]); /* the neighbour's read ends: it exits */
    waitpid(n, NULL, 0);
    close(go[0]);
}

static uint64_t clock_now;
static uint64_t scripted(void) { return clock_now; }

/* Locks with the engines brought up to t. */
static void lock_at(fg_state *st, uint64_t t) {
    clock_now = t;
    fg_state_lock(st);
}

static void utilisation(void) {
    char p[300], err[512];
    fg_state a;
    path(p, sizeof p, "util.state");
    CHECK(fg_state_attach(&a, p, 2, 1, err, sizeof err) == 0);
    a.clock = scripted;
    const uint64_t s = 1000000000ULL, t = 100 * s;
    lock_at(&a, t);
    CHECK(fg_state_submit(&a, 0, s / 2, s / 2) == 0);
    CHECK(fg_state_submit(&a, 0, s / 4, s / 4) == 0); /* queued behind the first */
    CHECK(fg_state_drain_at(&a, 0) == t + 3 * s / 4);
    fg_state_unlock(&a);
    lock_at(&a, t + s / 2);
    CHECK(fg_state_util(&a, 0, 0, t + s / 2, s) == 50);
    fg_state_unlock(&a);
    lock_at(&a, t + s);
    CHECK(a.sh->unit[0].count == 1); /* contiguous work of one process merges */
    CHECK(fg_state_util(&a, 0, 0, t + s, s) == 75);
    CHECK(fg_state_util(&a, 0, (int32_t)getpid(), t + s, s) == 75);
    CHECK(fg_state_util(&a, 0, 12345, t + s, s) == 0);
    CHECK(fg_state_drain_at(&a, 0) == 0);
    fg_state_unlock(&a);
    lock_at(&a, t + 3 * s);
    CHECK(fg_state_util(&a, 0, 0, t + 3 * s, s) == 0); /* idle again */
    fg_state_unlock(&a);
    fg_state_detach(&a);
}

/* More separate busy intervals in one window than the ring holds: the idle gaps between them
 * must not be counted as busy (half busy stays half busy). */
static void utilisation_ring_full(void) {
    char p[300], err[512];
    fg_state a;
    path(p, sizeof p, "util-full.state");
    CHECK(fg_state_attach(&a, p, 3, 1, err, sizeof err) == 0);
    a.clock = scripted;
    const uint64_t s = 1000000000ULL, t = 100 * s, n = 2 * FG_BUSY_RING, step = s / n;
    for (uint64_t i = 0; i < n; i++) {
        lock_at(&a, t + i * step);
        fg_state_submit(&a, 0, step / 2, step / 2); /* busy half of every step */
        fg_state_unlock(&a);
    }
    lock_at(&a, t + s);
    unsigned u = fg_state_util(&a, 0, 0, t + s, s);
    CHECK_MSG(u >= 49 && u <= 51, "utilisation %u%%, want 50%%", u);
    fg_state_unlock(&a);
    fg_state_detach(&a);
}

void test_state(void) {
    attach_checks();
    accounting();
    program_closes_descriptors();
    utilisation();
    utilisation_ring_full();
}
