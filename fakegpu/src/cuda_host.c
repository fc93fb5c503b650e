/* Pinned host memory (cuMemHostAlloc): real host memory, since callers write to it; never
 * charged to a device. */
#include <stdlib.h>

#include "cuda_internal.h"

static void **hosts; /* cuMemHostAlloc'd blocks, so cuMemFreeHost can refuse a stranger */
static size_t nhosts, caphosts;

/* Real host memory: callers write to it. Not charged to the device. */
FG_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
    (void)Flags;
    fg_ctx *c;
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pp || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = fg_cu_need_ctx(&c)) != CUDA_SUCCESS)
        return r;
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytesize) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&fg_cu.mu);
    if (nhosts == caphosts) {
        size_t ncap = caphosts ? caphosts * 2 : 16;
        void **h = realloc(hosts, ncap * sizeof *h);
        if (h)
            hosts = h, caphosts = ncap;
    }
    if (nhosts < caphosts)
        hosts[nhosts++] = p;
    else
        free(p), p = NULL;
    pthread_mutex_unlock(&fg_cu.mu);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pp = p;
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuMemFreeHost(void *p) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    for (size_t i = 0; p && i < nhosts; i++)
        if (hosts[i] == p) {
            hosts[i] = hosts[--nhosts];
            free(p);
            r = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}
