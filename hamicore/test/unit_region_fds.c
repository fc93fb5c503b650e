/* The region's descriptor is the program's to close: it closes it (closefrom before exec, a
 * double close, dup2 over it) and opens files of its own at that number. The library never locks
 * or closes a file of the program's, never takes a live process for dead by asking one, and its
 * own slot stays alive; a process that dies leaves no liveness behind in the children it forked. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "limitsfile.h"
#include "region.h"
#include "unit.h"

#define MIB (1ULL << 20)
#define KEEP_FD 900 /* where the tests keep their pipes: above what they close */

static struct lb_config cfg(const char *path)
{
    struct lb_config c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < LB_MAX_DEVICES; i++)
        c.mem_limit[i] = LB_MEM_UNLIMITED, c.sm_limit[i] = 100;
    c.mem_limit[0] = 3000 * MIB;
    c.priority = 1;
    snprintf(c.cache_path, sizeof c.cache_path, "%s/%s", unit_tmp_dir, path);
    unlink(c.cache_path);
    return c;
}

/* The descriptor the library holds on path (the test's view: /proc/self/fd). */
static int region_fd(const char *path)
{
    DIR *d = opendir("/proc/self/fd");
    int found = -1;
    for (struct dirent *e; d && found < 0 && (e = readdir(d));) {
        char link[300], target[600];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n > 0 && (target[n] = 0, strcmp(target, path) == 0))
            found = atoi(e->d_name);
    }
    if (d)
        closedir(d);
    return found;
}

/* fd is open on the file ino, and nobody holds a lock on any byte of it. */
static int untouched(int fd, ino_t ino)
{
    struct stat sb;
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    int probe = open(p, O_RDONLY);
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    int ok = fstat(fd, &sb) == 0 && sb.st_ino == ino && probe >= 0 && fcntl(probe, F_OFD_GETLK, &fl) == 0 &&
             fl.l_type == F_UNLCK;
    if (probe >= 0)
        close(probe);
    return ok;
}

/* A process of the pod that holds 1000 MiB; with closefrom it then closes every descriptor above
 * 2 and opens files of its own on those numbers. Returns its pid; *done ends it when closed. */
static pid_t neighbour(const struct lb_config *c, int closefrom, int *done)
{
    int ready[2], wait_end[2];
    if (pipe(ready) != 0 || pipe(wait_end) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        int out = dup2(ready[1], KEEP_FD), in = dup2(wait_end[0], KEEP_FD + 1);
        close(ready[0]), close(ready[1]), close(wait_end[0]), close(wait_end[1]);
        lb_region_init(c);
        int ok = lb_region_reserve(0, 1000 * MIB);
        if (closefrom) {
            close_range(3, KEEP_FD - 1, 0);
            for (int i = 0; i < 4; i++)
                ok &= open(c->cache_path, O_RDONLY) >= 0; /* a program reading the cache: its own descriptors */
            close(open("/dev/null", O_RDONLY));
        }
        char x;
        if (write(out, ok ? "y" : "n", 1) != 1 || read(in, &x, 1) < 0)
            _exit(2);
        _exit(0);
    }
    close(ready[1]), close(wait_end[0]);
    char x = 0;
    if (read(ready[0], &x, 1) != 1 || x != 'y')
        pid = -1;
    close(ready[0]);
    *done = wait_end[1];
    return pid;
}

static void end(pid_t pid, int done)
{
    close(done);
    if (pid > 0)
        waitpid(pid, NULL, 0);
}

/* The program puts a file of its own on the region's descriptor: the neighbour must not be
 * reclaimed through it (that would free its 1000 MiB for us: 3500 MiB under a 3000 MiB limit). */
static void test_program_reuses_the_number(void)
{
    struct lb_config c = cfg("reuse.cache");
    lb_region_init(&c);
    CHECK(lb_region_reserve(0, 1000 * MIB));
    int done;
    pid_t n = neighbour(&c, 0, &done);
    CHECK(n > 0);
    int fd = region_fd(c.cache_path);
    CHECK(fd >= 0);
    char other[600];
    snprintf(other, sizeof other, "%s/program-file", unit_tmp_dir);
    int mine = open(other, O_RDWR | O_CREAT, 0600);
    struct stat sb;
    CHECK(mine >= 0 && fstat(mine, &sb) == 0 && dup2(mine, fd) == fd);
    close(mine);
    if (lb_region_reserve(0, 1500 * MIB))
        unit_fail(__FILE__, __LINE__, "1500 MiB granted beside 2000 MiB held under 3000 MiB: a live neighbour was "
                                      "reclaimed through the program's fd %d", fd);
    CHECK(lb_region_reserve(0, 900 * MIB));
    if (!untouched(fd, sb.st_ino))
        unit_fail(__FILE__, __LINE__, "the program's fd %d was closed, replaced or locked", fd);
    end(n, done);
    CHECK(lb_region_reserve(0, 1000 * MIB)); /* the dead neighbour's memory still comes back */
    CHECK(untouched(fd, sb.st_ino));
}

/* A process that closes every descriptor (closefrom) stays alive for the others. */
static void test_closefrom_keeps_liveness(void)
{
    struct lb_config c = cfg("closefrom.cache");
    int done;
    pid_t n = neighbour(&c, 1, &done);
    CHECK(n > 0);
    lb_region_init(&c);
    if (lb_region_reserve(0, 2500 * MIB))
        unit_fail(__FILE__, __LINE__, "2500 MiB granted beside a live process's 1000 MiB that closed its "
                                      "descriptors: it was taken for dead");
    CHECK(lb_region_reserve(0, 2000 * MIB));
    end(n, done);
    CHECK(lb_region_reserve(0, 1000 * MIB)); /* once it is gone, its memory comes back */
}

/* A process dies while the child it forked lives: the dead parent's memory comes back. */
static void test_dead_parent_leaves_no_liveness(void)
{
    struct lb_config c = cfg("parent.cache");
    lb_region_init(&c);
    int ready[2];
    CHECK(pipe(ready) == 0);
    fflush(NULL);
    pid_t parent = fork();
    if (parent == 0) {
        if (!lb_region_reserve(0, 1000 * MIB))
            _exit(2);
        if (fork() == 0) {
            pid_t me = getpid();
            if (write(ready[1], &me, sizeof me) != (ssize_t)sizeof me)
                _exit(2);
            alarm(20);
            pause();
            _exit(0);
        }
        _exit(0);
    }
    close(ready[1]);
    pid_t grandchild = 0;
    CHECK(read(ready[0], &grandchild, sizeof grandchild) == (ssize_t)sizeof grandchild);
    int st;
    waitpid(parent, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (!lb_region_reserve(0, 2500 * MIB))
        unit_fail(__FILE__, __LINE__, "a dead parent's 1000 MiB still count while its forked child lives");
    if (grandchild > 0)
        kill(grandchild, SIGKILL);
}

/* The private region (a memfd: the cache path cannot be opened) is shared with forked children;
 * a child maps it through a description of its own (reopened through /proc), so its slot dies
 * with it and the parent gets the child's memory back. */
static void test_private_region_child_slot(void)
{
    struct lb_config c = cfg("private.cache");
    snprintf(c.cache_path, sizeof c.cache_path, "/nonexistent-dir/usage.cache");
    lb_region_init(&c);
    CHECK(lb_region != NULL && lb_region_reserve(0, 1000 * MIB));
    fflush(NULL);
    pid_t ch = fork();
    if (ch == 0)
        _exit(lb_region_reserve(0, 1500 * MIB) && !lb_region_reserve(0, 1000 * MIB) ? 0 : 1);
    int st;
    waitpid(ch, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (!lb_region_reserve(0, 2000 * MIB))
        unit_fail(__FILE__, __LINE__, "the dead child's 1500 MiB still count in the private region");
}

const struct unit_test unit_region_fds_tests[] = {
    {"region/the program's file on our descriptor's number is never asked nor touched", test_program_reuses_the_number},
    {"region/a process that closes its descriptors stays alive", test_closefrom_keeps_liveness},
    {"region/a dead parent's memory comes back while its child lives", test_dead_parent_leaves_no_liveness},
    {"region/a forked child's slot in the private region is its own", test_private_region_child_slot},
    {NULL, NULL},
};
