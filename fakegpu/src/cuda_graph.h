/*
 * What fakegpu's stream, graph, executable-graph and capture files share (cuda_graph.c owns it):
 * the objects' types and registries. Everything under fg_cu.mu.
 */
#ifndef FG_CUDA_GRAPH_H
#define FG_CUDA_GRAPH_H

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

/* The tables (cuda_graph.c). Registries: plain pointer vectors (tests create few objects). */
extern fg_stream fg_streams[FG_MAX_STREAMS];
extern int fg_capturing; /* streams capturing now: the launch and allocation paths skip the lock at 0 */
extern gmem fg_gm[FG_MAX_UNITS];
extern graph **fg_graphs;
extern size_t fg_ngraphs, fg_capgraphs;
extern gexec **fg_execs;
extern size_t fg_nexecs, fg_capexecs;
extern live_alloc *fg_lives;
extern size_t fg_nlives, fg_caplives;

int fg_reg_add(void ***v, size_t *n, size_t *cap, void *p);
long fg_reg_find(void **v, size_t n, const void *p);
void fg_reg_del(void **v, size_t *n, long i);
#define G_ADD(p) fg_reg_add((void ***)&fg_graphs, &fg_ngraphs, &fg_capgraphs, (p))
#define G_FIND(p) fg_reg_find((void **)fg_graphs, fg_ngraphs, (p))
#define X_ADD(p) fg_reg_add((void ***)&fg_execs, &fg_nexecs, &fg_capexecs, (p))
#define X_FIND(p) fg_reg_find((void **)fg_execs, fg_nexecs, (p))

/* A live stream of ours, or NULL (the default streams are none). */
fg_stream *fg_stream_of(CUstream s);
/* NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are the default streams (*out NULL); takes the lock. */
CUresult fg_stream_check(CUstream h, fg_stream **out);
void fg_graph_free(graph *g);
/* A new registered graph; NULL when out of memory. */
graph *fg_graph_new(void);
gnode *fg_node_add(graph *g, CUgraphNodeType type);
/* An allocation node: its address reserved now, its memory when an executable graph runs. */
CUresult fg_alloc_node(graph *g, size_t bytes, int dev, CUdeviceptr *dptr, gnode **out);
/* The allocation to free: one of this graph's allocation nodes, or an outstanding graph allocation. */
int fg_freeable_in(const graph *g, CUdeviceptr dptr);

#endif
