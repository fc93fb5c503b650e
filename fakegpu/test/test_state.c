/* The shared state: attach checks, accounting across processes, reclaim of a killed process,
 * robust-mutex recovery, fork slots and the utilisation arithmetic. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
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
    utilisation();
    utilisation_ring_full();
}
