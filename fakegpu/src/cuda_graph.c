/*
 * Graphs and the tables streams, executable graphs and capture share (cuda_graph.h). Graph, node
 * and exec handles are heap objects found through registries, so a stale or foreign handle is
 * refused rather than read. Everything under fg_cu.mu.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_graph.h"

fg_stream fg_streams[FG_MAX_STREAMS];
int fg_capturing; /* streams capturing now: the launch and allocation paths skip the lock at 0 */
gmem fg_gm[FG_MAX_UNITS];
/* Registries: plain pointer vectors (tests create few objects). */
graph **fg_graphs;
size_t fg_ngraphs, fg_capgraphs;
gexec **fg_execs;
size_t fg_nexecs, fg_capexecs;
live_alloc *fg_lives;
size_t fg_nlives, fg_caplives;

int fg_reg_add(void ***v, size_t *n, size_t *cap, void *p) {
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

long fg_reg_find(void **v, size_t n, const void *p) {
    for (size_t i = 0; p && i < n; i++)
        if (v[i] == p)
            return (long)i;
    return -1;
}

void fg_reg_del(void **v, size_t *n, long i) { v[i] = v[--*n]; }

/* A live node of a registered graph, or NULL. */
static gnode *node_of(CUgraphNode h) {
    gnode *n = (gnode *)h;
    for (size_t i = 0; n && i < fg_ngraphs; i++)
        for (size_t j = 0; j < fg_graphs[i]->n; j++)
            if (fg_graphs[i]->nodes[j] == n)
                return n;
    return NULL;
}

fg_stream *fg_stream_of(CUstream s) {
    uintptr_t p = (uintptr_t)s, b = (uintptr_t)fg_streams;
    if (p < b || p >= b + sizeof fg_streams || (p - b) % sizeof fg_streams[0])
        return NULL;
    fg_stream *st = (fg_stream *)s;
    return st->magic == FG_STREAM_LIVE ? st : NULL;
}

CUresult fg_stream_check(CUstream h, fg_stream **out) {
    *out = NULL;
    if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&fg_cu.mu);
    *out = fg_stream_of(h);
    pthread_mutex_unlock(&fg_cu.mu);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

void fg_graph_free(graph *g) {
    for (size_t i = 0; i < g->n; i++)
        free(g->nodes[i]);
    free(g->nodes);
    free(g);
}

graph *fg_graph_new(void) {
    graph *g = calloc(1, sizeof *g);
    if (g && G_ADD(g) != 0) {
        free(g);
        g = NULL;
    }
    return g;
}

gnode *fg_node_add(graph *g, CUgraphNodeType type) {
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
    graph *g = fg_graph_new();
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
        graph *g = fg_graphs[i];
        fg_reg_del((void **)fg_graphs, &fg_ngraphs, i);
        for (size_t x = 0; x < fg_nexecs; x++) /* executable graphs are independent of their graph */
            if (fg_execs[x]->from == g)
                fg_execs[x]->from = NULL;
        fg_graph_free(g);
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
    if (gi < 0 || (r = deps_ok(deps, nd, fg_graphs[gi])) != CUDA_SUCCESS)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (!(n = fg_node_add(fg_graphs[gi], CU_GRAPH_NODE_TYPE_KERNEL)))
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

CUresult fg_alloc_node(graph *g, size_t bytes, int dev, CUdeviceptr *dptr, gnode **out) {
    if (!fg_cu_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr va = fg_va_reserve(bytes, FG_GRANULE);
    if (!va)
        return CUDA_ERROR_OUT_OF_MEMORY;
    gnode *n = fg_node_add(g, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
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
    if (gi < 0 || deps_ok(deps, nd, fg_graphs[gi]) != CUDA_SUCCESS)
        r = CUDA_ERROR_INVALID_VALUE;
    else if ((r = fg_alloc_node(fg_graphs[gi], p->bytesize, p->poolProps.location.id, &p->dptr, &n)) == CUDA_SUCCESS)
        *ph = (CUgraphNode)n;
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

/* The allocation to free: one made by an allocation node of this graph, or a graph
 * allocation already outstanding. */
int fg_freeable_in(const graph *g, CUdeviceptr dptr) {
    for (size_t i = 0; i < g->n; i++)
        if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && g->nodes[i]->dptr == dptr)
            return 1;
    for (size_t i = 0; i < fg_nlives; i++)
        if (fg_lives[i].dptr == dptr)
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
    if (gi < 0 || deps_ok(deps, nd, fg_graphs[gi]) != CUDA_SUCCESS || !fg_freeable_in(fg_graphs[gi], dptr))
        r = CUDA_ERROR_INVALID_VALUE;
    else if (!(n = fg_node_add(fg_graphs[gi], CU_GRAPH_NODE_TYPE_MEM_FREE)))
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
        graph *g = fg_graphs[gi];
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

static void graph_forget_all(void) {
    /* The parent's objects stay the parent's; the child starts without graphs or streams. The
     * heap objects are leaked on purpose: the child may not own a consistent heap view of them. */
    fg_graphs = NULL, fg_ngraphs = fg_capgraphs = 0;
    fg_execs = NULL, fg_nexecs = fg_capexecs = 0;
    fg_lives = NULL, fg_nlives = fg_caplives = 0;
    memset(fg_streams, 0, sizeof fg_streams);
    memset(fg_gm, 0, sizeof fg_gm);
    fg_capturing = 0;
}
static const fg_cu_observer graph_tables_observer = {.forget_all = graph_forget_all};
static void __attribute__((constructor)) graph_tables_register(void) {
    fg_cu_observe(&graph_tables_observer, FG_CU_STAGE_RESERVES);
}
