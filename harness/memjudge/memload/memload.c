/*
 * memload: the C half of the memory judge (harness/memjudge). One process of a pod that does,
 * step by step, what the judge tells it: every device-memory path of the driver API — the ones
 * libvgpu.so hooks and the ones it should — plus the process behaviour that has let memory past
 * a limiter before (threads, fork with and without exec, descriptor churn and exhaustion, signal
 * handlers that allocate). It builds against the ABI headers only and links the libcuda.so.1 it
 * finds (fakegpu, or the real driver: `make -C harness/memjudge/memload real`).
 *
 * Protocol: one command per line on fd 0, one reply per line on fd 1 (fd 0/1 survive closing
 * every other descriptor). `memload` serves its standard input; `memload --connect PATH` first
 * connects to the judge's Unix socket (fork children, spawned processes). The first line is
 * "hello PID". A reply is "ok [values]" or "err CODE [what]" (CODE: the CUDA error, -1 for a
 * system error). Objects are named by the judge (ID), so a sequence replays exactly.
 *
 *   init DEV                cuInit, the primary context of ordinal DEV current; "ok UUID"
 *   use DEV                 make ordinal DEV's primary context current; "ok UUID"
 *   alloc ID KIND BYTES     KIND: mem mem1 managed pitch pitch1 array array1 array3d array3d1
 *                           mipmap async pool vmm vmmx module heap stack
 *   graph ID NODES BYTES F  a graph of NODES allocation nodes of BYTES/NODES each (F=1: each
 *                           freed inside the graph), instantiated and launched
 *   free ID                 frees what ID holds, the way its kind is freed
 *   ipcget ID               "ok HEX": the legacy IPC handle of allocation ID
 *   ipcopen ID HEX          opens it here
 *   vmmexport ID            "ok PID FD": VMM allocation ID (kind vmmx) as a descriptor
 *   vmmimport ID PID FD BYTES   takes PID's descriptor (pidfd_getfd), imports and maps it
 *   ctxcreate ID DEV        a created context on DEV, current ("ok UUID"); `free ID` destroys it and
 *                           says what is current then ("ok ORDINAL UUID CTXID", CTXID -1 for a
 *                           primary context; "ok none")
 *   reset DEV               cuDevicePrimaryCtxReset, then DEV's primary context again, current;
 *                           "ok UUID"
 *   trim                    synchronise, trim the pools and the graph memory
 *   poolcycle N             N times: a new pool, 2 MiB from it (freed), the pool destroyed
 *   burst THREADS N BYTES   THREADS threads, each N x (cuMemAlloc, cuMemFree); "ok GRANTED REFUSED"
 *   sigalloc BYTES N [US]   N times: a timer signal whose handler allocates BYTES lands while
 *                           this thread is inside a (slowed) cuMemAlloc; "ok GRANTED REFUSED".
 *                           US: instead, a signal every US microseconds all through each call
 *                           (it also lands in the library's own work before the driver's)
 *   sigfree                 frees what the handlers got
 *   fork PATH               a child without exec, served over PATH; "ok PID"
 *   spawn PATH              a child that execs memload --connect PATH; "ok PID"
 *   closeall [keepdriver]   closes every descriptor but 0, 1, 2 (close_range); keepdriver: and but a
 *                           real driver's /dev/nvidia* (closing those ends the CUDA context itself)
 *   closecache PATH         opens PATH (the pod's usage.cache) and closes it again
 *   exhaust / unexhaust     fills the descriptor table (until EMFILE) / gives it back
 *   exit                    exits normally
 */
#include <dlfcn.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "memload.h"

static int *hoard, nhoard;
static void cmd_fork(const char *path, int exec);

struct burst {
    CUcontext ctx;
    long n;
    size_t bytes;
    long granted, refused;
};

static void *burst_thread(void *arg)
{
    struct burst *b = arg;
    cuCtxSetCurrent(b->ctx);
    for (long i = 0; i < b->n; i++) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, b->bytes) == CUDA_SUCCESS) {
            b->granted++;
            cuMemFree(p);
        } else {
            b->refused++;
        }
    }
    return NULL;
}

static void cmd_burst(int threads, long n, size_t bytes)
{
    if (threads <= 0 || threads > 64) {
        reply("err -1 threads");
        return;
    }
    pthread_t t[64];
    struct burst b[64];
    CUcontext c = NULL;
    cuCtxGetCurrent(&c);
    for (int i = 0; i < threads; i++) {
        b[i] = (struct burst){c, n, bytes, 0, 0};
        pthread_create(&t[i], NULL, burst_thread, &b[i]);
    }
    long g = 0, f = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        g += b[i].granted, f += b[i].refused;
    }
    reply("ok %ld %ld", g, f);
}

/* Signal handlers that allocate. The handler's allocations are kept (up to SIGMAX) and freed by
 * `sigfree`; they happen while this thread is inside a cuMemAlloc the driver makes slow. */
#define SIGMAX 256
static CUdeviceptr sig_ptrs[SIGMAX];
static atomic_int sig_n, sig_refused;
static size_t sig_bytes;

static void on_alarm(int sig)
{
    (void)sig;
    int saved = errno;
    CUdeviceptr p;
    if (cuMemAlloc(&p, sig_bytes) == CUDA_SUCCESS) {
        int i = atomic_fetch_add(&sig_n, 1);
        if (i < SIGMAX)
            sig_ptrs[i] = p;
    } else {
        atomic_fetch_add(&sig_refused, 1);
    }
    errno = saved;
}

static void cmd_sigalloc(size_t bytes, int n, long period_us)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    sig_bytes = bytes;
    int before = atomic_load(&sig_n), refused_before = atomic_load(&sig_refused);
    /* fakegpu: each allocation stays 30 ms in the driver (a real driver lacks the call: the signal
     * then lands wherever it lands) */
    void (*delay)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "fakegpuSetAllocDelayMs");
    if (delay)
        delay(30);
    for (int i = 0; i < n && atomic_load(&sig_n) < SIGMAX; i++) {
        struct itimerval it = {{0, 0}, {0, 10000}}; /* fires 10 ms into the slowed call */
        if (period_us > 0)
            it.it_value.tv_usec = it.it_interval.tv_usec = period_us;
        setitimer(ITIMER_REAL, &it, NULL);
        CUdeviceptr p;
        if (cuMemAlloc(&p, 2 * MIB) == CUDA_SUCCESS)
            cuMemFree(p);
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_REAL, &off, NULL);
        struct timespec ts = {0, 30000000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    if (delay)
        delay(0);
    reply("ok %d %d", atomic_load(&sig_n) - before, atomic_load(&sig_refused) - refused_before);
}

static void cmd_sigfree(void)
{
    int n = atomic_exchange(&sig_n, 0);
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < n && i < SIGMAX; i++)
        if (cuMemFree(sig_ptrs[i]) != CUDA_SUCCESS)
            r = CUDA_ERROR_INVALID_VALUE;
    result(r);
}

static int connect_to(const char *path)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (s < 0 || strlen(path) >= sizeof a.sun_path)
        return -1;
    strcpy(a.sun_path, path);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0 || dup2(s, 0) != 0 || dup2(s, 1) != 1) {
        close(s);
        return -1;
    }
    close(s);
    return 0;
}

static char self[4096];

static void cmd_fork(const char *path, int exec)
{
    pid_t pid = fork();
    if (pid < 0) {
        reply("err -1 fork: %s", strerror(errno));
        return;
    }
    if (pid == 0) {
        if (exec) {
            execl(self, self, "--connect", path, (char *)NULL);
            _exit(126);
        }
        /* Without exec: a new process of the pod with the parent's memory image but no CUDA
         * objects of its own (the driver gives a child none). The parent's hoard of descriptors
         * is not the child's: given back, so that it can reach the judge. */
        while (nhoard > 0)
            close(hoard[--nhoard]);
        if (connect_to(path) != 0)
            _exit(125);
        for (int i = 0; i < MAXOBJ; i++)
            if (objs[i].fd > 0)
                objs[i].fd = -1;
        memset(objs, 0, sizeof objs);
        memset(primary, 0, sizeof primary);
        memset(pools, 0, sizeof pools);
        cur_dev = -1;
        reply("hello %d", (int)getpid());
        return;
    }
    reply("ok %d", (int)pid);
}

static void cmd_exhaust(void)
{
    int cap = 1 << 20;
    if (!hoard)
        hoard = malloc(sizeof *hoard * (size_t)cap);
    int fd;
    while (hoard && nhoard < cap && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        hoard[nhoard++] = fd;
    reply("ok %d", nhoard);
}

static void cmd_unexhaust(void)
{
    while (nhoard > 0)
        close(hoard[--nhoard]);
    reply("ok");
}

/* Every descriptor above 2 closed, but (keep_driver) the driver's own device files. */
static int close_all(int keep_driver)
{
    if (!keep_driver)
        return (int)syscall(SYS_close_range, 3u, ~0u, 0);
    int keep[256], nkeep = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) && nkeep < 256) {
        char path[64], target[256];
        int fd = atoi(e->d_name);
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (fd > 2 && fd != dirfd(d) && n > 0 && (target[n] = 0, !strncmp(target, "/dev/nvidia", 11)))
            keep[nkeep++] = fd;
    }
    closedir(d);
    for (int i = 1; i < nkeep; i++) /* ascending */
        for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
            int t = keep[j];
            keep[j] = keep[j - 1], keep[j - 1] = t;
        }
    int from = 3;
    for (int k = 0; k <= nkeep; k++) { /* the gaps between the kept ones */
        int to = k < nkeep ? keep[k] - 1 : -1;
        if ((k == nkeep || to >= from) && syscall(SYS_close_range, (unsigned)from, (unsigned)to, 0) != 0)
            return -1;
        if (k < nkeep)
            from = keep[k] + 1;
    }
    return 0;
}

/* A reaper for children we forked: the judge watches them through their own connections. */
static void on_child(int sig)
{
    (void)sig;
    int saved = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    errno = saved;
}

/* One command line of the driver (harness/memjudge): its operation, then up to four arguments. */
static void dispatch(const char *line)
{
    char op[32] = "", a1[256] = "", a2[256] = "", a3[64] = "", a4[64] = "";
    int nf = sscanf(line, "%31s %255s %255s %63s %63s", op, a1, a2, a3, a4);
    if (nf < 1)
        return;
    long id = strtol(a1, NULL, 10);
    if (!strcmp(op, "init"))
        cmd_init((int)id);
    else if (!strcmp(op, "use"))
        cmd_init((int)id); /* cuInit again is a no-op: the same reply, with the UUID */
    else if (!strcmp(op, "alloc"))
        cmd_alloc(id, a2, strtoull(a3, NULL, 10));
    else if (!strcmp(op, "graph"))
        cmd_graph(id, strtol(a2, NULL, 10), strtoull(a3, NULL, 10), atoi(a4));
    else if (!strcmp(op, "free"))
        cmd_free(id);
    else if (!strcmp(op, "ipcget"))
        cmd_ipcget(id);
    else if (!strcmp(op, "ipcopen"))
        cmd_ipcopen(id, a2);
    else if (!strcmp(op, "vmmexport"))
        cmd_vmmexport(id);
    else if (!strcmp(op, "vmmimport"))
        cmd_vmmimport(id, atoi(a2), atoi(a3), strtoull(a4, NULL, 10));
    else if (!strcmp(op, "ctxcreate"))
        cmd_ctxcreate(id, atoi(a2));
    else if (!strcmp(op, "reset"))
        cmd_reset((int)id);
    else if (!strcmp(op, "trim"))
        cmd_trim();
    else if (!strcmp(op, "poolcycle"))
        cmd_poolcycle(id);
    else if (!strcmp(op, "burst"))
        cmd_burst((int)id, strtol(a2, NULL, 10), strtoull(a3, NULL, 10));
    else if (!strcmp(op, "sigalloc"))
        cmd_sigalloc(strtoull(a1, NULL, 10), atoi(a2), strtol(a3, NULL, 10));
    else if (!strcmp(op, "sigfree"))
        cmd_sigfree();
    else if (!strcmp(op, "fork") || !strcmp(op, "spawn"))
        cmd_fork(a1, !strcmp(op, "spawn"));
    else if (!strcmp(op, "closeall"))
        reply(close_all(!strcmp(a1, "keepdriver")) == 0 ? "ok" : "err -1 close_range");
    else if (!strcmp(op, "closecache")) {
        int fd = open(a1, O_RDONLY | O_CLOEXEC);
        if (fd >= 0)
            close(fd);
        reply(fd >= 0 ? "ok" : "err -1 open %s", a1);
    } else if (!strcmp(op, "exhaust"))
        cmd_exhaust();
    else if (!strcmp(op, "unexhaust"))
        cmd_unexhaust();
    else if (!strcmp(op, "exit"))
        exit(0);
    else
        reply("err -1 unknown command %s", op);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--connect")) {
        if (connect_to(argv[2]) != 0) {
            fprintf(stderr, "memload: cannot connect to %s: %s\n", argv[2], strerror(errno));
            return 2;
        }
    } else if (argc != 1) {
        fprintf(stderr, "usage: memload [--connect SOCKET]\n");
        return 2;
    }
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0)
        self[n] = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_child;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGCHLD, &sa, NULL);
    reply("hello %d", (int)getpid());
    char line[1024];
    size_t len = 0;
    for (;;) {
        ssize_t got = read(0, line + len, 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return 0;
        if (line[len] != '\n') {
            if (len < sizeof line - 1)
                len++;
            continue;
        }
        line[len] = 0;
        len = 0;
        dispatch(line);
    }
}
