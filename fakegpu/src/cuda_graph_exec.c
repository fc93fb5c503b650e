/*
 * Executable graphs and graph memory, per the CUDA semantics of graph memory nodes: an allocation
 * node's virtual address is fixed when the node is added and lives as long as the graph. Physical
 * memory comes from a per-device graph memory pool: reserved (charged to the device) when an
 * executable graph is uploaded or launched, *used* from the allocation node's execution until its
 * free (a free node in the graph, or cuMemFree/cuMemFreeAsync outside it). Reserved memory that is
 * not in use stays with the pool until cuDeviceGraphMemTrim (or a primary-context reset). The
 * driver keeps it mapped into the graphs' address ranges meanwhile, and its "used" attributes
 * report that mapping, not what is allocated: on an H200 (driver 580)
 * CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT equals the reserve after every step of
 * hamicore/test/paths/graph.c, frees included, so fakegpu reports the reserve there too (what is
 * allocated, `used` below, decides reuse). A launch while an allocation of the same executable
 * graph is still unfreed fails (CUDA_ERROR_INVALID_VALUE) unless it was instantiated with
 * CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH. A graph with allocation nodes has at most one
 * executable graph at a time (CUDA_ERROR_NOT_SUPPORTED). A launch runs the kernel nodes as
 * launches on the current context (busy time, utilisation). Everything under fg_cu.mu.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_graph.h"

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
    graph *g = fg_graphs[gi];
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
    for (size_t i = 0; i < fg_nlives; i++)
        if (fg_lives[i].dptr == dptr)
            return (long)i;
    return -1;
}

static void live_drop(long i) {
    fg_gm[fg_lives[i].dev].used -= fg_lives[i].bytes;
    fg_lives[i] = fg_lives[--fg_nlives];
}

/* Grows the device's graph pool so that `need` more bytes can be used. */
static CUresult gm_reserve(int dev, uint64_t need) {
    gmem *m = &fg_gm[dev];
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
    *x = fg_execs[xi];
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
    fg_ctx *c;
    fg_stream *s;
    gexec *x;
    CUresult r = fg_stream_check(hStream, &s);
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
    CUresult r = fg_stream_check(hStream, &s);
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
        gmem *m = &fg_gm[g->dev];
        if (g->freed_inside)
            continue; /* used and given back within the launch: the reserve is what it costs */
        if (fg_nlives == fg_caplives) {
            size_t nc = fg_caplives ? fg_caplives * 2 : 16;
            live_alloc *t = realloc(fg_lives, nc * sizeof *t);
            if (!t) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
                goto out;
            }
            fg_lives = t, fg_caplives = nc;
        }
        fg_lives[fg_nlives++] = (live_alloc){g->dptr, g->bytes, g->dev, x};
        m->used += g->bytes;
        if (m->used > m->used_high)
            m->used_high = m->used;
    }
    for (size_t a = 0; a < x->na; a++) { /* the high-water mark sees allocations freed inside too */
        gmem *m = &fg_gm[x->allocs[a].dev];
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
        gexec *x = fg_execs[xi];
        fg_reg_del((void **)fg_execs, &fg_nexecs, xi);
        if (x->from && G_FIND(x->from) >= 0)
            x->from->execs--;
        for (size_t i = 0; i < fg_nlives; i++)
            if (fg_lives[i].by == x)
                fg_lives[i].by = NULL;
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
    gexec *x = fg_execs[xi];
    graph *g = fg_graphs[gi];
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
    gmem *m = &fg_gm[dev];
    if (m->reserved > m->used) {
        fg_mem_uncharge(dev, m->reserved - m->used);
        m->reserved = m->used;
    }
}

/* A primary-context reset frees every graph allocation of the device and empties its pool. */
static void graph_ctx_gone(int dev, int primary) {
    if (!primary)
        return;
    for (size_t i = 0; i < fg_nlives;)
        if (fg_lives[i].dev == dev)
            live_drop((long)i);
        else
            i++;
    trim_dev(dev);
    fg_gm[dev].reserved_high = fg_gm[dev].used_high = 0;
}
static void graph_observe_ctx(fg_ctx *c) { graph_ctx_gone(c->dev, c->primary); }
static const fg_cu_observer graph_exec_observer = {.ctx_gone = graph_observe_ctx};
static void __attribute__((constructor)) graph_exec_register(void) { fg_cu_observe(&graph_exec_observer, FG_CU_STAGE_RESERVES); }



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
    const gmem *m = &fg_gm[device];
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
        fg_gm[device].used_high = fg_gm[device].used;
    fg_gm[device].reserved_high = fg_gm[device].reserved; /* the reported "used" high-water mark too */
    pthread_mutex_unlock(&fg_cu.mu);
    return CUDA_SUCCESS;
}
