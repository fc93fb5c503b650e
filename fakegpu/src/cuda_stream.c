/*
 * Streams: handles into a static array (magic-tagged, cuda_graph.c). Work is not ordered per
 * stream: a stream's synchronisation waits for its context's queued work, and is a
 * synchronisation point for memory pools (cuda_pool.c); so is the context's.
 */
#include <string.h>

#include "cuda_graph.h"

FG_EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority) {
    (void)priority;
    fg_ctx *c;
    CUresult r = fg_cu_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phStream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&fg_cu.mu);
    for (int i = 0; i < FG_MAX_STREAMS; i++)
        if (fg_streams[i].magic != FG_STREAM_LIVE) {
            fg_streams[i] = (fg_stream){FG_STREAM_LIVE, c->dev, NULL};
            *phStream = (CUstream)&fg_streams[i];
            r = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int flags) {
    return cuStreamCreateWithPriority(phStream, flags, 0);
}

FG_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&fg_cu.mu);
    fg_stream *s = fg_stream_of(hStream);
    if (!s) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else {
        if (s->capture) { /* an unfinished capture is discarded with its stream */
            long i = G_FIND(s->capture);
            if (i >= 0)
                fg_reg_del((void **)fg_graphs, &fg_ngraphs, i);
            fg_graph_free(s->capture);
            __atomic_sub_fetch(&fg_capturing, 1, __ATOMIC_RELEASE);
        }
        memset(s, 0, sizeof *s);
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
    fg_ctx *c;
    fg_stream *s;
    CUresult r = fg_cu_need_ctx(&c);
    if (r != CUDA_SUCCESS || (r = fg_stream_check(hStream, &s)) != CUDA_SUCCESS)
        return r;
    if (s && s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if ((r = fg_launch_drain(c)) != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&fg_cu.mu);
    fg_pool_sync(c->dev);
    pthread_mutex_unlock(&fg_cu.mu);
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return cuStreamSynchronize(hStream); }

FG_EXPORT CUresult cuStreamQuery(CUstream hStream) {
    fg_ctx *c;
    fg_stream *s;
    CUresult r = fg_cu_need_ctx(&c);
    if (r != CUDA_SUCCESS || (r = fg_stream_check(hStream, &s)) != CUDA_SUCCESS)
        return r;
    return fg_launch_query(c);
}

FG_EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream) { return cuStreamQuery(hStream); }

/* Waits until the work this context queued on the simulated engine has drained. */
FG_EXPORT CUresult cuCtxSynchronize(void) {
    fg_ctx *c;
    CUresult r = fg_cu_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if ((r = fg_launch_drain(c)) != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&fg_cu.mu);
    fg_pool_sync(c->dev); /* a synchronisation point: pools give back what is above their threshold */
    pthread_mutex_unlock(&fg_cu.mu);
    return CUDA_SUCCESS;
}
