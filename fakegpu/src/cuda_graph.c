/*
 * Streams, stream capture and graphs, as far as limits are decided by them.
 *
 * Streams: handles into a static array (magic-tagged). Work is not ordered per stream: a
 * stream's synchronisation waits for its context's queued work, and is a synchronisation point
 * for memory pools (cuda_pool.c).
 *
 * Capture: between cuStreamBeginCapture and cuStreamEndCapture a stream records instead of
 * running: a launch becomes a kernel node, cuMemAllocAsync a memory allocation node (the address
 * is returned at once, no memory is allocated), cuMemFreeAsync a memory free node. The legacy
 * NULL stream cannot capture (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED).
 *
 * Graph memory, per the CUDA semantics of graph memory nodes: an allocation node's virtual
 * address is fixed when the node is added and lives as long as the graph. Physical memory comes
 * from a per-device graph memory pool: reserved (charged to the device) when an executable graph
 * is uploaded or launched, *used* from the allocation node's execution until its free (a free
 * node in the graph, or cuMemFree/cuMemFreeAsync outside it). Reserved memory that is not in use
 * stays with the pool until cuDeviceGraphMemTrim (or a primary-context reset). The driver keeps
 * it mapped into the graphs' address ranges meanwhile, and its "used" attributes report that
 * mapping, not what is allocated: on an H200 (driver 580) CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT
 * equals the reserve after every step of hamicore/test/paths/graph.c, frees included, so fakegpu
 * reports the reserve there too (what is allocated, `used` below, decides reuse). A launch while an
 * allocation of the same executable graph is still unfreed fails (CUDA_ERROR_INVALID_VALUE)
 * unless it was instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH. A graph with
 * allocation nodes has at most one executable graph at a time (CUDA_ERROR_NOT_SUPPORTED).
 * A launch runs the kernel nodes as launches on the current context (busy time, utilisation).
 * Graph, node and exec handles are heap objects found through registries, so a stale or foreign
 * handle is refused rather than read. Everything under fg_cu.mu.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_internal.h"

#define FG_MAX_STREAMS 256
#define FG_STREAM_LIVE 0x5354524du /* "STRM" */

typedef struct gnode {
    struct graph *g;
    CUgraphNodeType type;
    CUfunction func;  /* kernel */
    uint64_t blocks;  /* kernel */
    uint64_t ns;      /* kernel: its simulated duration, priced when the node is made */
    CUdeviceptr dptr; /* alloc, free */
    uint64_t bytes;   /* alloc */
    int dev;          /* alloc */
} gnode;

typedef struct graph {
    gnode **nodes;
    size_t n, cap;
    int execs; /* live executable graphs made from it */
} graph;

typedef struct galloc { /* an allocation node of an executable graph */
    CUdeviceptr dptr;
    uint64_t bytes;
    int dev;
    int freed_inside; /* the graph frees it too */
} galloc;

typedef struct gexec {
    graph *from;
    CUfunction *kfunc;
    uint64_t *kblocks;
    uint64_t *kns;
    size_t nk;
    galloc *allocs;
    size_t na;
    CUdeviceptr *frees; /* free nodes of allocations made elsewhere (another graph's) */
    size_t nf;
    unsigned long long flags;
} gexec;

typedef struct fg_stream {
    uint32_t magic;
    int dev;
    graph *capture; /* non-NULL while capturing */
} fg_stream;

/* Per device: the graph memory pool, and the outstanding (executed, not yet freed) allocations. */
typedef struct gmem {
    uint64_t reserved, used, reserved_high, used_high;
} gmem;

typedef struct live_alloc {
    CUdeviceptr dptr;
    uint64_t bytes;
    int dev;
    const gexec *by;
} live_alloc;

static fg_stream streams[FG_MAX_STREAMS];
static int g_capturing; /* streams capturing now: the launch and allocation paths skip the lock at 0 */
static gmem gm[FG_MAX_UNITS];
/* Registries: plain pointer vectors (tests create few objects). */
static graph **graphs;
static size_t ngraphs, capgraphs;
static gexec **execs;
static size_t nexecs, capexecs;
static live_alloc *lives;
static size_t nlives, caplives;

static int reg_add(void ***v, size_t *n, size_t *cap, void *p) {
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        void **t = realloc(*v, nc * sizeof *t);
        if (!t)
            return -1;
        *v = t, *cap = nc;
    }
    (*v)[(*n)++] = p;
    return 0;
}

static long reg_find(void **v, size_t n, const void *p) {
    for (size_t i = 0; p && i < n; i++)
        if (v[i] == p)
            return (long)i;
    return -1;
}

static void reg_del(void **v, size_t *n, long i) { v[i] = v[--*n]; }

#define G_ADD(p) reg_add((void ***)&graphs, &ngraphs, &capgraphs, (p))
#define G_FIND(p) reg_find((void **)graphs, ngraphs, (p))
#define X_ADD(p) reg_add((void ***)&execs, &nexecs, &capexecs, (p))
#define X_FIND(p) reg_find((void **)execs, nexecs, (p))

static gnode *node_of(CUgraphNode h) {
    gnode *n = (gnode *)h;
    for (size_t i = 0; n && i < ngraphs; i++)
        for (size_t j = 0; j < graphs[i]->n; j++)
            if (graphs[i]->nodes[j] == n)
                return n;
    return NULL;
}

/* ---- streams ---- */

static fg_stream *stream_of(CUstream s) {
    uintptr_t p = (uintptr_t)s, b = (uintptr_t)streams;
    if (p < b || p >= b + sizeof streams || (p - b) % sizeof streams[0])
        return NULL;
    fg_stream *st = (fg_stream *)s;
    return st->magic == FG_STREAM_LIVE ? st : NULL;
}

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
        if (streams[i].magic != FG_STREAM_LIVE) {
            streams[i] = (fg_stream){FG_STREAM_LIVE, c->dev, NULL};
            *phStream = (CUstream)&streams[i];
            r = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int flags) {
    return cuStreamCreateWithPriority(phStream, flags, 0);
}

static void graph_free(graph *g);

FG_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&fg_cu.mu);
    fg_stream *s = stream_of(hStream);
    if (!s) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else {
        if (s->capture) { /* an unfinished capture is discarded with its stream */
            long i = G_FIND(s->capture);
            if (i >= 0)
                reg_del((void **)graphs, &ngraphs, i);
            graph_free(s->capture);
            __atomic_sub_fetch(&g_capturing, 1, __ATOMIC_RELEASE);
        }
        memset(s, 0, sizeof *s);
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

/* NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are the default streams. */
static CUresult stream_check(CUstream h, fg_stream **out) {
    *out = NULL;
    if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&fg_cu.mu);
    *out = stream_of(h);
    pthread_mutex_unlock(&fg_cu.mu);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FG_EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
    fg_ctx *c;
    fg_stream *s;
    CUresult r = fg_cu_need_ctx(&c);
    if (r != CUDA_SUCCESS || (r = stream_check(hStream, &s)) != CUDA_SUCCESS)
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
    if (r != CUDA_SUCCESS || (r = stream_check(hStream, &s)) != CUDA_SUCCESS)
        return r;
    return fg_launch_query(c);
}

FG_EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream) { return cuStreamQuery(hStream); }

/* ---- graphs ---- */

static void graph_free(graph *g) {
    for (size_t i = 0; i < g->n; i++)
        free(g->nodes[i]);
    free(g->nodes);
    free(g);
}

static graph *graph_new(void) {
    graph *g = calloc(1, sizeof *g);
    if (g && G_ADD(g) != 0) {
        free(g);
        g = NULL;
    }
    return g;
}

static gnode *node_add(graph *g, CUgraphNodeType type) {
    if (g->n == g->cap) {
        size_t nc = g->cap ? g->cap * 2 : 8;
        gnode **t = realloc(g->nodes, nc * sizeof *t);
        if (!t)
            return NULL;
        g->nodes = t, g->cap = nc;
    }
    gnode *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->g = g, n->type = type;
    g->nodes[g->n++] = n;
    return n;
}

FG_EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!phGraph || flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    graph *g = graph_new();
    pthread_mutex_unlock(&fg_cu.mu);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuGraphDestroy(CUgraph hGraph) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&fg_cu.mu);
    long i = G_FIND(hGraph);
    if (i < 0) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        graph *g = graphs[i];
        reg_del((void **)graphs, &ngraphs, i);
        for (size_t x = 0; x < nexecs; x++) /* executable graphs are independent of their graph */
            if (execs[x]->from == g)
                execs[x]->from = NULL;
        graph_free(g);
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

/* Dependencies only order nodes, and the fake runs nothing in parallel: checked, not kept. */
static CUresult deps_ok(const CUgraphNode *deps, size_t n, const graph *g) {
    if (n && !deps)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) {
        gnode *d = node_of(deps[i]);
        if (!d || d->g != g)
            return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult kernel_node(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t nd, CUfunction f,
                            unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            void **params) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ph || !f || !gx || !gy || !gz || !bx || !by || !bz || (uint64_t)bx * by * bz > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    long gi = G_FIND(hg);
    gnode *n = NULL;
    if (gi < 0 || (r = deps_ok(deps, nd, graphs[gi])) != CUDA_SUCCESS)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (!(n = node_add(graphs[gi], CU_GRAPH_NODE_TYPE_KERNEL)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        n->func = f, n->blocks = (uint64_t)gx * gy * gz, n->ns = fg_cu_kernel_ns_here(f, n->blocks, params),
        *ph = (CUgraphNode)n;
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t nd,
                                           const CUDA_KERNEL_NODE_PARAMS_v2 *p) {
    if (!p)
        return fg_cu_ready() ? fg_cu_ready() : CUDA_ERROR_INVALID_VALUE;
    return kernel_node(ph, hg, deps, nd, p->func, p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY,
                       p->blockDimZ, p->kernelParams);
}

FG_EXPORT CUresult cuGraphAddKernelNode(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t nd,
                                        const CUDA_KERNEL_NODE_PARAMS_v1 *p) {
    if (!p)
        return fg_cu_ready() ? fg_cu_ready() : CUDA_ERROR_INVALID_VALUE;
    return kernel_node(ph, hg, deps, nd, p->func, p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY,
                       p->blockDimZ, p->kernelParams);
}

static CUresult alloc_node(graph *g, size_t bytes, int dev, CUdeviceptr *dptr, gnode **out) {
    if (!fg_cu_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr va = fg_va_reserve(bytes, FG_GRANULE);
    if (!va)
        return CUDA_ERROR_OUT_OF_MEMORY;
    gnode *n = node_add(g, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    n->dptr = va, n->bytes = fg_granules(bytes), n->dev = dev;
    *dptr = va;
    *out = n;
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t nd,
                                          CUDA_MEM_ALLOC_NODE_PARAMS *p) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ph || !p || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    long gi = G_FIND(hg);
    gnode *n = NULL;
    if (gi < 0 || deps_ok(deps, nd, graphs[gi]) != CUDA_SUCCESS)
        r = CUDA_ERROR_INVALID_VALUE;
    else if ((r = alloc_node(graphs[gi], p->bytesize, p->poolProps.location.id, &p->dptr, &n)) == CUDA_SUCCESS)
        *ph = (CUgraphNode)n;
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

/* The allocation to free: one made by an allocation node of this graph, or a graph
 * allocation already outstanding. */
static int freeable_in(const graph *g, CUdeviceptr dptr) {
    for (size_t i = 0; i < g->n; i++)
        if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && g->nodes[i]->dptr == dptr)
            return 1;
    for (size_t i = 0; i < nlives; i++)
        if (lives[i].dptr == dptr)
            return 1;
    return 0;
}

FG_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t nd,
                                         CUdeviceptr dptr) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ph)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    long gi = G_FIND(hg);
    gnode *n = NULL;
    if (gi < 0 || deps_ok(deps, nd, graphs[gi]) != CUDA_SUCCESS || !freeable_in(graphs[gi], dptr))
        r = CUDA_ERROR_INVALID_VALUE;
    else if (!(n = node_add(graphs[gi], CU_GRAPH_NODE_TYPE_MEM_FREE)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        n->dptr = dptr, *ph = (CUgraphNode)n;
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *out) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    gnode *n = node_of(hNode);
    if (!n || n->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        memset(out, 0, sizeof *out);
        out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        out->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        out->poolProps.location.id = n->dev;
        out->bytesize = n->bytes;
        out->dptr = n->dptr;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr_out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    gnode *n = node_of(hNode);
    if (!n || n->type != CU_GRAPH_NODE_TYPE_MEM_FREE)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        *dptr_out = n->dptr;
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!numNodes)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    long gi = G_FIND(hGraph);
    if (gi < 0) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        graph *g = graphs[gi];
        if (nodes) /* as the driver: fills up to *numNodes, then reports the actual count */
            for (size_t i = 0; i < g->n && i < *numNodes; i++)
                nodes[i] = (CUgraphNode)g->nodes[i];
        *numNodes = g->n;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!type)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    gnode *n = node_of(hNode);
    if (n)
        *type = n->type;
    else
        r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

/* The node's kernel as it was added. fakegpu keeps only the grid's block count (nothing runs):
 * the grid reads back as blocks x 1 x 1, the block shape as 1 x 1 x 1, no parameters. */
static CUresult kernel_params(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v2 *p, size_t size) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    gnode *n = node_of(hNode);
    if (!n || n->type != CU_GRAPH_NODE_TYPE_KERNEL) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        CUDA_KERNEL_NODE_PARAMS_v2 k = {0};
        k.func = n->func;
        k.gridDimX = n->blocks > 0xFFFFFFFFu ? 0xFFFFFFFFu : (unsigned)n->blocks, k.gridDimY = 1, k.gridDimZ = 1;
        k.blockDimX = 1, k.blockDimY = 1, k.blockDimZ = 1;
        memcpy(p, &k, size);
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) {
    return kernel_params(hNode, nodeParams, sizeof *nodeParams);
}

FG_EXPORT CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
    return kernel_params(hNode, (CUDA_KERNEL_NODE_PARAMS_v2 *)(void *)nodeParams, sizeof *nodeParams);
}

/* ---- executable graphs ---- */

static void exec_free(gexec *x) {
    free(x->kfunc), free(x->kblocks), free(x->kns), free(x->allocs), free(x->frees), free(x);
}

static CUresult instantiate(CUgraphExec *out, CUgraph hGraph, unsigned long long flags) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || (flags & ~(unsigned long long)(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | 2 | 8)))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    long gi = G_FIND(hGraph);
    gexec *x = NULL;
    if (gi < 0) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    graph *g = graphs[gi];
    size_t nk = 0, na = 0, nf = 0;
    for (size_t i = 0; i < g->n; i++)
        nk += g->nodes[i]->type == CU_GRAPH_NODE_TYPE_KERNEL, na += g->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC,
            nf += g->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_FREE;
    if (na && g->execs) {
        r = CUDA_ERROR_NOT_SUPPORTED; /* one executable graph at a time for graphs with allocations */
        goto out;
    }
    x = calloc(1, sizeof *x);
    if (!x || !(x->kfunc = calloc(nk + 1, sizeof *x->kfunc)) || !(x->kblocks = calloc(nk + 1, sizeof *x->kblocks)) ||
        !(x->kns = calloc(nk + 1, sizeof *x->kns)) ||
        !(x->allocs = calloc(na + 1, sizeof *x->allocs)) || !(x->frees = calloc(nf + 1, sizeof *x->frees)) ||
        X_ADD(x) != 0) {
        if (x)
            exec_free(x);
        x = NULL;
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    x->from = g, x->flags = flags;
    for (size_t i = 0; i < g->n; i++) {
        gnode *n = g->nodes[i];
        if (n->type == CU_GRAPH_NODE_TYPE_KERNEL)
            x->kfunc[x->nk] = n->func, x->kns[x->nk] = n->ns, x->kblocks[x->nk++] = n->blocks;
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
            x->allocs[x->na++] = (galloc){n->dptr, n->bytes, n->dev, 0};
    }
    for (size_t i = 0; i < g->n; i++) {
        if (g->nodes[i]->type != CU_GRAPH_NODE_TYPE_MEM_FREE)
            continue;
        int own = 0;
        for (size_t a = 0; a < x->na; a++)
            if (x->allocs[a].dptr == g->nodes[i]->dptr)
                x->allocs[a].freed_inside = own = 1;
        if (!own)
            x->frees[x->nf++] = g->nodes[i]->dptr;
    }
    g->execs++;
    *out = (CUgraphExec)x;
out:
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
    return instantiate(phGraphExec, hGraph, flags);
}

/* CUDA_GRAPH_INSTANTIATE_PARAMS: flags first, then an upload stream and two outputs. */
FG_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph, void *params) {
    unsigned long long flags = 0;
    if (params)
        memcpy(&flags, params, sizeof flags);
    return instantiate(phGraphExec, hGraph, flags);
}

FG_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                         char *logBuffer, size_t bufferSize) {
    if (phErrorNode)
        *phErrorNode = NULL;
    if (logBuffer && bufferSize)
        logBuffer[0] = 0;
    return instantiate(phGraphExec, hGraph, 0);
}

FG_EXPORT CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                      char *logBuffer, size_t bufferSize) {
    return cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

static long live_find(CUdeviceptr dptr) {
    for (size_t i = 0; i < nlives; i++)
        if (lives[i].dptr == dptr)
            return (long)i;
    return -1;
}

static void live_drop(long i) {
    gm[lives[i].dev].used -= lives[i].bytes;
    lives[i] = lives[--nlives];
}

/* Grows the device's graph pool so that `need` more bytes can be used. */
static CUresult gm_reserve(int dev, uint64_t need) {
    gmem *m = &gm[dev];
    uint64_t spare = m->reserved - m->used;
    if (need > spare) {
        CUresult r = fg_mem_charge(dev, need - spare);
        if (r != CUDA_SUCCESS)
            return r;
        m->reserved += need - spare;
        if (m->reserved > m->reserved_high)
            m->reserved_high = m->reserved;
    }
    return CUDA_SUCCESS;
}

/* What the executable graph's allocations need per device, beyond what it already holds. */
static CUresult exec_reserve(const gexec *x) {
    uint64_t need[FG_MAX_UNITS] = {0};
    for (size_t a = 0; a < x->na; a++)
        if (live_find(x->allocs[a].dptr) < 0)
            need[x->allocs[a].dev] += x->allocs[a].bytes;
    for (int d = 0; d < FG_MAX_UNITS; d++)
        if (need[d] && gm_reserve(d, need[d]) != CUDA_SUCCESS)
            return CUDA_ERROR_OUT_OF_MEMORY; /* what was reserved stays with the pool, as in the driver */
    return CUDA_SUCCESS;
}

static CUresult exec_check(CUgraphExec h, fg_ctx **c, gexec **x) {
    CUresult r = fg_cu_need_ctx(c);
    if (r != CUDA_SUCCESS)
        return r;
    long xi = X_FIND(h);
    if (xi < 0)
        return CUDA_ERROR_INVALID_VALUE;
    *x = execs[xi];
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
    fg_ctx *c;
    fg_stream *s;
    gexec *x;
    CUresult r = stream_check(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&fg_cu.mu);
    if ((r = exec_check(hGraphExec, &c, &x)) == CUDA_SUCCESS)
        r = exec_reserve(x);
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    return cuGraphUpload(hGraphExec, hStream);
}

FG_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    fg_ctx *c;
    fg_stream *s;
    gexec *x;
    CUresult r = stream_check(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (s && s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* child-graph capture is not modelled */
    pthread_mutex_lock(&fg_cu.mu);
    if ((r = exec_check(hGraphExec, &c, &x)) != CUDA_SUCCESS)
        goto out;
    for (size_t f = 0; f < x->nf; f++) /* another graph's allocation must be live to be freed here */
        if (live_find(x->frees[f]) < 0) {
            r = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
    for (size_t f = 0; f < x->nf; f++) /* freed in stream order, before this graph allocates */
        live_drop(live_find(x->frees[f]));
    for (size_t a = 0; a < x->na; a++) {
        long li = live_find(x->allocs[a].dptr);
        if (li < 0)
            continue;
        if (!(x->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)) {
            r = CUDA_ERROR_INVALID_VALUE; /* its previous allocation was never freed */
            goto out;
        }
        live_drop(li);
    }
    if ((r = exec_reserve(x)) != CUDA_SUCCESS)
        goto out;
    for (size_t a = 0; a < x->na; a++) {
        const galloc *g = &x->allocs[a];
        gmem *m = &gm[g->dev];
        if (g->freed_inside)
            continue; /* used and given back within the launch: the reserve is what it costs */
        if (nlives == caplives) {
            size_t nc = caplives ? caplives * 2 : 16;
            live_alloc *t = realloc(lives, nc * sizeof *t);
            if (!t) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
                goto out;
            }
            lives = t, caplives = nc;
        }
        lives[nlives++] = (live_alloc){g->dptr, g->bytes, g->dev, x};
        m->used += g->bytes;
        if (m->used > m->used_high)
            m->used_high = m->used;
    }
    for (size_t a = 0; a < x->na; a++) { /* the high-water mark sees allocations freed inside too */
        gmem *m = &gm[x->allocs[a].dev];
        uint64_t peak = m->used;
        for (size_t b = 0; b < x->na; b++)
            if (x->allocs[b].freed_inside && x->allocs[b].dev == x->allocs[a].dev)
                peak += x->allocs[b].bytes;
        if (peak > m->used_high)
            m->used_high = peak;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    for (size_t k = 0; k < x->nk; k++) /* nothing else may free x meanwhile but a racing destroy */
        if ((r = fg_launch(x->kfunc[k], x->kblocks[k], x->kns[k])) != CUDA_SUCCESS)
            return r;
    return CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    return cuGraphLaunch(hGraphExec, hStream);
}

/* Allocations the executable graph made and nobody freed stay allocated (freed later by
 * cuMemFree/cuMemFreeAsync or with the context). */
FG_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&fg_cu.mu);
    long xi = X_FIND(hGraphExec);
    if (xi < 0) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        gexec *x = execs[xi];
        reg_del((void **)execs, &nexecs, xi);
        if (x->from && G_FIND(x->from) >= 0)
            x->from->execs--;
        for (size_t i = 0; i < nlives; i++)
            if (lives[i].by == x)
                lives[i].by = NULL;
        exec_free(x);
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

/* Updates the kernels of an executable graph from a graph of the same shape: the same number of
 * kernel nodes and no memory nodes (the driver refuses memory nodes in an update too). */
static CUresult exec_update(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResult *res) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&fg_cu.mu);
    long xi = X_FIND(hGraphExec), gi = G_FIND(hGraph);
    *res = CU_GRAPH_EXEC_UPDATE_ERROR;
    if (xi < 0 || gi < 0) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    gexec *x = execs[xi];
    graph *g = graphs[gi];
    size_t nk = 0;
    for (size_t i = 0; i < g->n; i++) {
        if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || g->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
            nk = (size_t)-1;
        if (nk != (size_t)-1)
            nk += g->nodes[i]->type == CU_GRAPH_NODE_TYPE_KERNEL;
    }
    if (nk != x->nk || x->na) {
        *res = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
        r = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
        goto out;
    }
    for (size_t i = 0, k = 0; i < g->n; i++)
        if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_KERNEL)
            x->kfunc[k] = g->nodes[i]->func, x->kblocks[k] = g->nodes[i]->blocks, x->kns[k++] = g->nodes[i]->ns;
    *res = CU_GRAPH_EXEC_UPDATE_SUCCESS;
out:
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo) {
    if (!resultInfo)
        return fg_cu_ready() ? fg_cu_ready() : CUDA_ERROR_INVALID_VALUE;
    memset(resultInfo, 0, sizeof *resultInfo);
    return exec_update(hGraphExec, hGraph, &resultInfo->result);
}

FG_EXPORT CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
                                     CUgraphExecUpdateResult *updateResult_out) {
    if (!hErrorNode_out || !updateResult_out)
        return fg_cu_ready() ? fg_cu_ready() : CUDA_ERROR_INVALID_VALUE;
    *hErrorNode_out = NULL;
    return exec_update(hGraphExec, hGraph, updateResult_out);
}

int fg_graph_free_ptr(CUdeviceptr dptr) {
    long i = live_find(dptr);
    if (i < 0)
        return 0;
    live_drop(i);
    return 1;
}

static void trim_dev(int dev) {
    gmem *m = &gm[dev];
    if (m->reserved > m->used) {
        fg_mem_uncharge(dev, m->reserved - m->used);
        m->reserved = m->used;
    }
}

/* A primary-context reset frees every graph allocation of the device and empties its pool. */
static void graph_ctx_gone(int dev, int primary) {
    if (!primary)
        return;
    for (size_t i = 0; i < nlives;)
        if (lives[i].dev == dev)
            live_drop((long)i);
        else
            i++;
    trim_dev(dev);
    gm[dev].reserved_high = gm[dev].used_high = 0;
}

static void graph_forget_all(void) {
    /* The parent's objects stay the parent's; the child starts without graphs or streams. The
     * heap objects are leaked on purpose: the child may not own a consistent heap view of them. */
    graphs = NULL, ngraphs = capgraphs = 0;
    execs = NULL, nexecs = capexecs = 0;
    lives = NULL, nlives = caplives = 0;
    memset(streams, 0, sizeof streams);
    memset(gm, 0, sizeof gm);
    g_capturing = 0;
}
static void graph_observe_ctx(fg_ctx *c) { graph_ctx_gone(c->dev, c->primary); }
static const fg_cu_observer graph_observer = {.ctx_gone = graph_observe_ctx, .forget_all = graph_forget_all};
static void __attribute__((constructor)) graph_register(void) { fg_cu_observe(&graph_observer, FG_CU_STAGE_RESERVES); }

FG_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!fg_cu_dev_valid(device))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fg_cu.mu);
    trim_dev(device);
    pthread_mutex_unlock(&fg_cu.mu);
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!fg_cu_dev_valid(device))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    const gmem *m = &gm[device];
    uint64_t v = 0;
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: v = m->reserved; break; /* mapped, as the driver reports */
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: v = m->reserved_high; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: v = m->reserved; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: v = m->reserved_high; break;
    default: r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    if (r == CUDA_SUCCESS)
        memcpy(value, &v, sizeof v);
    return r;
}

FG_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!fg_cu_dev_valid(device))
        return CUDA_ERROR_INVALID_DEVICE;
    uint64_t v = 1;
    if (value)
        memcpy(&v, value, sizeof v);
    if (v != 0 || (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH))
        return CUDA_ERROR_INVALID_VALUE; /* only the high-water marks, and only reset to 0 */
    pthread_mutex_lock(&fg_cu.mu);
    if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
        gm[device].used_high = gm[device].used;
    gm[device].reserved_high = gm[device].reserved; /* the reported "used" high-water mark too */
    pthread_mutex_unlock(&fg_cu.mu);
    return CUDA_SUCCESS;
}

/* ---- capture ---- */

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
    fg_stream *s = stream_of(hStream);
    if (!s)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (s->capture)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else if (!(s->capture = graph_new()))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        __atomic_add_fetch(&g_capturing, 1, __ATOMIC_RELEASE);
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
    fg_stream *s = stream_of(hStream);
    if (!s && hStream && hStream != CU_STREAM_LEGACY && hStream != CU_STREAM_PER_THREAD)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (!s || !s->capture)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else
        *phGraph = (CUgraph)s->capture, s->capture = NULL, __atomic_sub_fetch(&g_capturing, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
    return cuStreamEndCapture(hStream, phGraph);
}

FG_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *status) {
    fg_stream *s;
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS || (r = stream_check(hStream, &s)) != CUDA_SUCCESS)
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
    fg_stream *s = stream_of(h);
    return s ? s->capture : NULL;
}

int fg_capture_alloc(CUstream hStream, size_t size, CUdeviceptr *dptr, CUresult *r) {
    if (!__atomic_load_n(&g_capturing, __ATOMIC_ACQUIRE))
        return 0;
    fg_ctx *c = fg_cu_current();
    pthread_mutex_lock(&fg_cu.mu);
    graph *g = capturing(hStream);
    if (g) {
        gnode *n;
        *r = c ? alloc_node(g, size, c->dev, dptr, &n) : CUDA_ERROR_INVALID_CONTEXT;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return g != NULL;
}

int fg_capture_free(CUstream hStream, CUdeviceptr dptr, CUresult *r) {
    if (!__atomic_load_n(&g_capturing, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&fg_cu.mu);
    graph *g = capturing(hStream);
    if (g) {
        gnode *n = NULL;
        if (!freeable_in(g, dptr))
            *r = CUDA_ERROR_INVALID_VALUE;
        else if (!(n = node_add(g, CU_GRAPH_NODE_TYPE_MEM_FREE)))
            *r = CUDA_ERROR_OUT_OF_MEMORY;
        else
            n->dptr = dptr, *r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return g != NULL;
}

int fg_capture_kernel(CUstream hStream, CUfunction f, uint64_t blocks, uint64_t ns, CUresult *r) {
    if (!__atomic_load_n(&g_capturing, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&fg_cu.mu);
    graph *g = capturing(hStream);
    if (g) {
        gnode *n = node_add(g, CU_GRAPH_NODE_TYPE_KERNEL);
        if (n)
            n->func = f, n->blocks = blocks, n->ns = ns;
        *r = n ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return g != NULL;
}
