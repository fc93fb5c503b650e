/* fork while another thread is inside the library's initialisation: 20 rounds, each in a fresh
 * process whose second thread calls cuInit while the main thread forks. The child must neither
 * hang (a stuck once-flag or a lock held by the initialising thread; 20 s alarm) nor crash, nor
 * inherit the parent's accounting: where the driver lets the child use the device it allocates
 * and frees 1 MiB and its usage is exactly 0 afterwards. A real driver may refuse CUDA in a child
 * whose parent initialised it (its documented fork rule): accepted, counted. fakegpu lets the
 * child use it; run.sh sets PATH_FORK_CUDA=required there.
 * native and limited: every round passes. */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "path.h"

static void *init_thread(void *arg)
{
    (void)arg;
    cuInit(0);
    return NULL;
}

static int child(void)
{
    alarm(20);
    path_failed = 0;
    CUcontext c;
    CUdevice d;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&d, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS ||
        cuCtxSetCurrent(c) != CUDA_SUCCESS)
        return 5; /* the driver refuses CUDA in this child */
    unsigned long long start = free_mib();
    CUdeviceptr p;
    if (cuMemAlloc(&p, MIB) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS)
        return 3;
    unsigned long long f = free_mib();
    if (path_limited ? f != path_limit_mib : f != start)
        return 4;
    return 0;
}

static int round_once(void)
{
    pthread_t t;
    pthread_create(&t, NULL, init_thread, NULL);
    pid_t c = fork();
    if (c == 0)
        _exit(child());
    int st = 0;
    waitpid(c, &st, 0);
    pthread_join(t, NULL);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int main(void)
{
    path_begin();
    int bad = 0, refused = 0;
    const char *req = getenv("PATH_FORK_CUDA");
    int required = req && strcmp(req, "required") == 0;
    for (int i = 0; i < 20; i++) {
        fflush(NULL);
        pid_t p = fork();
        if (p == 0)
            _exit(round_once());
        int st = 0;
        waitpid(p, &st, 0);
        int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 200;
        if (rc == 5 && !required) {
            refused++;
            continue;
        }
        if (rc != 0) {
            printf("FAIL round %d: child status %d (3 alloc failed, 4 usage not 0, 5 driver refused, 114 hung)\n", i, rc);
            bad++;
        }
    }
    EXPECT(bad == 0, "20 forks during initialisation: %d failed, %d where the driver refused CUDA in the child", bad,
           refused);
    return path_end("fork-during-init");
}
