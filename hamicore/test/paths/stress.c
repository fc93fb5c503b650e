/* 8 threads x PATH_ITERS (default 100000) alloc/free pairs on one context, each thread keeping
 * up to 4 allocations live, every other one 256 MiB (about 4 GiB at once: more than the limit).
 * native:  nothing refused (the GPU has room); free memory back to where it was.
 * limited: some refused, never more than the limit in use at once (checked by cuMemGetInfo
 *          staying >= 0 and every grant being backed); usage exactly 0 at the end. Run under TSan. */
#include <pthread.h>

#include "path.h"

#define THREADS 8
#define LIVE 4
#define SZ (256 * MIB)

static CUcontext g_ctx;
static long g_iters = 100000;
static long g_refused[THREADS], g_errors[THREADS];

static void *worker(void *arg)
{
    long id = (long)arg;
    CUdeviceptr live[LIVE] = {0};
    if (cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS) {
        g_errors[id]++;
        return NULL;
    }
    for (long i = 0; i < g_iters; i++) {
        int slot = (int)(i % LIVE);
        if (live[slot]) {
            if (cuMemFree(live[slot]) != CUDA_SUCCESS)
                g_errors[id]++;
            live[slot] = 0;
        }
        CUresult r = cuMemAlloc(&live[slot], i % 2 ? 1 * MIB : SZ);
        if (r == CUDA_ERROR_OUT_OF_MEMORY)
            g_refused[id]++, live[slot] = 0;
        else if (r != CUDA_SUCCESS)
            g_errors[id]++, live[slot] = 0;
    }
    for (int s = 0; s < LIVE; s++)
        if (live[s] && cuMemFree(live[s]) != CUDA_SUCCESS)
            g_errors[id]++;
    return NULL;
}

int main(void)
{
    path_begin();
    const char *it = getenv("PATH_ITERS");
    if (it)
        g_iters = atol(it);
    g_ctx = path_ctx();
    unsigned long long start = free_mib();
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    long refused = 0, errors = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        refused += g_refused[i], errors += g_errors[i];
    }
    EXPECT(errors == 0, "%ld errors other than OUT_OF_MEMORY", errors);
    if (path_limited)
        EXPECT(refused > 0, "%ld allocations refused at the limit", refused);
    else
        EXPECT(refused == 0, "%ld allocations refused", refused);
    expect_all_released(start);
    return path_end("threads-stress");
}
