/* The program's descriptors are the program's. Under the drivers' and the library's fork
 * handlers, and whatever the program does to their descriptors:
 *  1. a child forked before cuInit keeps the parent's standard input and a file it opened (the
 *     driver libraries are loaded, their constructors have run; login read its terminal from a
 *     standard input fakegpu's handler had closed);
 *  2. a process that closes every descriptor above 2 (closefrom), then opens files of its own on
 *     those numbers and goes on using CUDA, still counts for its neighbour (its liveness did not
 *     end with the descriptor), still sees its neighbour (it did not ask one of its own files
 *     who lives), and its files are neither closed nor locked.
 * Only descriptors of regular files are closed (the libraries' state files and usage cache are
 * regular files, a memfd too): a real driver's device files, pipes and event descriptors are left
 * open, closing them would end CUDA on a real GPU whatever the library does. The neighbour is
 * forked before the parent's cuInit, so that a real driver lets it use the device.
 * native and limited: both hold. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "path.h"

#define KEEP 900 /* the pipes live here: above what the program closes */

static ino_t ino_of(int fd)
{
    struct stat sb;
    return fstat(fd, &sb) == 0 ? sb.st_ino : 0;
}

/* 1: fork before cuInit; the child compares its descriptors 0 and extra with the parent's. */
static void fork_before_init(void)
{
    int in = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    int extra = open("/proc/self/exe", O_RDONLY);
    EXPECT(in >= 0 && dup2(in, 0) == 0 && extra > 2, "a known standard input and a file of our own");
    close(in);
    ino_t want0 = ino_of(0), want_extra = ino_of(extra);
    fflush(NULL);
    pid_t c = fork();
    if (c == 0)
        _exit((ino_of(0) == want0 ? 0 : 1) | (ino_of(extra) == want_extra ? 0 : 2));
    int st = 0;
    waitpid(c, &st, 0);
    EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0,
           "forked before cuInit, the child keeps standard input and fd %d (status %d: 1 stdin lost, 2 fd lost)", extra,
           WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    close(extra);
}

/* Asks for more than is free: under the library a refusal reclaims dead processes' memory. */
static void refused(void)
{
    CUdeviceptr q;
    if (cuMemAlloc(&q, (free_mib() + 64) * MIB) == CUDA_SUCCESS)
        cuMemFree(q);
}

/* The neighbour: its own CUDA, 256 MiB, then on each command byte it asks for more than is free
 * (which makes the library reclaim dead processes first) and reports the free memory it sees. */
static pid_t neighbour(int *cmd, int *report)
{
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0)
        return -1;
    fflush(NULL);
    pid_t c = fork();
    if (c == 0) {
        alarm(60);
        close(up[0]), close(down[1]);
        path_ctx();
        CUdeviceptr p;
        unsigned long long f = cuMemAlloc(&p, 256 * MIB) == CUDA_SUCCESS ? free_mib() : 0;
        char x;
        while (write(up[1], &f, sizeof f) == (ssize_t)sizeof f && read(down[0], &x, 1) == 1) {
            refused();
            f = free_mib();
        }
        _exit(0);
    }
    close(up[1]), close(down[0]);
    *cmd = dup2(down[1], KEEP), *report = dup2(up[0], KEEP + 1);
    close(down[1]), close(up[0]);
    return c;
}

static unsigned long long ask(int cmd, int report)
{
    unsigned long long f = 0;
    if (write(cmd, "?", 1) != 1 || read(report, &f, sizeof f) != (ssize_t)sizeof f)
        return 0;
    return f;
}

/* Every descriptor of a regular file above 2 and below KEEP. */
static void close_most(void)
{
    int fds[KEEP], n = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));) {
        int fd = atoi(e->d_name);
        struct stat sb;
        if (fd <= 2 || fd >= KEEP || fd == dirfd(d) || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        fds[n++] = fd;
    }
    if (d)
        closedir(d);
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

/* No lock on any byte of the file behind fd, asked through a description of our own. */
static int unlocked(int fd)
{
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    int probe = open(p, O_RDONLY);
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    int ok = probe >= 0 && fcntl(probe, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK;
    if (probe >= 0)
        close(probe);
    return ok;
}

int main(void)
{
    path_begin();
    fork_before_init();
    int cmd = -1, report = -1;
    pid_t n = neighbour(&cmd, &report);
    unsigned long long seen = 0;
    EXPECT(n > 0 && read(report, &seen, sizeof seen) == (ssize_t)sizeof seen && seen > 0,
           "a neighbour holds 256 MiB (it sees %llu MiB free)", seen);
    path_ctx();
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 512 * MIB));
    unsigned long long tol = path_limited ? 0 : NATIVE_TOL, both = ask(cmd, report), mine = free_mib();
    EXPECT(near(mine, both, tol), "both see the same free memory: %llu and %llu MiB", mine, both);

    close_most();
    int files[8];
    ino_t inos[8];
    for (int i = 0; i < 8; i++) { /* the program's own files on the numbers the libraries had */
        files[i] = open("/proc/self/exe", O_RDONLY);
        inos[i] = ino_of(files[i]);
    }
    refused();
    CUdeviceptr q;
    CU(cuMemAlloc(&q, 2 * MIB));
    CU(cuMemFree(q));
    unsigned long long after = free_mib(), theirs = ask(cmd, report);
    EXPECT(near(after, mine, tol), "after closing its descriptors the process still sees its neighbour: %llu MiB free, "
           "was %llu", after, mine);
    EXPECT(near(theirs, both, tol), "and the neighbour still sees it: %llu MiB free, was %llu", theirs, both);
    int intact = 1;
    for (int i = 0; i < 8; i++)
        intact &= files[i] >= 0 && ino_of(files[i]) == inos[i] && unlocked(files[i]);
    EXPECT(intact, "the program's files on those numbers are neither closed nor locked");

    close(cmd);
    int st = 0;
    waitpid(n, &st, 0);
    refused();
    unsigned long long gone = free_mib();
    EXPECT(gone >= mine + 256 - tol, "the neighbour's memory is back once it exits: %llu MiB free, was %llu", gone, mine);
    CU(cuMemFree(p));
    return path_end("descriptors");
}
