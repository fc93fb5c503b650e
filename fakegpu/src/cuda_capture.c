/*
 * Capture: between cuStreamBeginCapture and cuStreamEndCapture a stream records instead of
 * running: a launch becomes a kernel node, cuMemAllocAsync a memory allocation node (the address
 * is returned at once, no memory is allocated), cuMemFreeAsync a memory free node. The legacy
 * NULL stream cannot capture (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED). Everything under fg_cu.mu.
 */
#include "cuda_graph.h"

static CUresult begin(CUstream hStream, CUstreamCaptureMode mode) {
    fg_ctx *c;
    CUresult r = fg_cu_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (!hStream || hStream == CU_STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    pthread_mutex_lock(&fg_cu.mu);
    fg_stream *s = fg_stream_of(hStream);
    if (!s)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (s->capture)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else if (!(s->capture = fg_graph_new()))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        __atomic_add_fetch(&fg_capturing, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) { return begin(hStream, mode); }
FG_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
    return begin(hStream, mode);
}
FG_EXPORT CUresult cuStreamBeginCapture(CUstream hStream) { return begin(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL); }
FG_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
    return begin(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

FG_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    fg_stream *s = fg_stream_of(hStream);
    if (!s && hStream && hStream != CU_STREAM_LEGACY && hStream != CU_STREAM_PER_THREAD)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (!s || !s->capture)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else
        *phGraph = (CUgraph)s->capture, s->capture = NULL, __atomic_sub_fetch(&fg_capturing, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
    return cuStreamEndCapture(hStream, phGraph);
}

FG_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *status) {
    fg_stream *s;
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS || (r = fg_stream_check(hStream, &s)) != CUDA_SUCCESS)
        return r;
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    *status = s && s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    pthread_mutex_unlock(&fg_cu.mu);
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *status) {
    return cuStreamIsCapturing(hStream, status);
}

/* The capture hooks of the allocation and launch paths: cheap when nothing captures. */
static graph *capturing(CUstream h) {
    fg_stream *s = fg_stream_of(h);
    return s ? s->capture : NULL;
}

int fg_capture_alloc(CUstream hStream, size_t size, CUdeviceptr *dptr, CUresult *r) {
    if (!__atomic_load_n(&fg_capturing, __ATOMIC_ACQUIRE))
        return 0;
    fg_ctx *c = fg_cu_current();
    pthread_mutex_lock(&fg_cu.mu);
    graph *g = capturing(hStream);
    if (g) {
        gnode *n;
        *r = c ? fg_alloc_node(g, size, c->dev, dptr, &n) : CUDA_ERROR_INVALID_CONTEXT;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return g != NULL;
}

int fg_capture_free(CUstream hStream, CUdeviceptr dptr, CUresult *r) {
    if (!__atomic_load_n(&fg_capturing, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&fg_cu.mu);
    graph *g = capturing(hStream);
    if (g) {
        gnode *n = NULL;
        if (!fg_freeable_in(g, dptr))
            *r = CUDA_ERROR_INVALID_VALUE;
        else if (!(n = fg_node_add(g, CU_GRAPH_NODE_TYPE_MEM_FREE)))
            *r = CUDA_ERROR_OUT_OF_MEMORY;
        else
            n->dptr = dptr, *r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return g != NULL;
}

int fg_capture_kernel(CUstream hStream, CUfunction f, uint64_t blocks, uint64_t ns, CUresult *r) {
    if (!__atomic_load_n(&fg_capturing, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&fg_cu.mu);
    graph *g = capturing(hStream);
    if (g) {
        gnode *n = fg_node_add(g, CU_GRAPH_NODE_TYPE_KERNEL);
        if (n)
            n->func = f, n->blocks = blocks, n->ns = ns;
        *r = n ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return g != NULL;
}
