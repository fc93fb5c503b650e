/* Graph memory nodes: physical memory is taken when an executable graph is uploaded/launched,
 * from the device's graph memory pool, and stays reserved there until cuDeviceGraphMemTrim.
 *   A (captured): cuMemAllocAsync 2000 MiB, a kernel, cuMemFreeAsync — freed inside the graph
 *   B (explicit): a 1500 MiB allocation node, not freed by the graph (freed later by cuMemFree)
 *   C (explicit): a 1600 MiB allocation node
 *   D, E, F: D allocates 1500 MiB, E (another graph) frees them, F allocates 2500 MiB
 * native:  nothing is taken at capture/instantiate; A's launch reserves 2000 MiB; B reuses it;
 *          C's launch is granted (the pool grows to 3100 MiB); trim gives everything back.
 * limited: the same, except that C's launch is refused (3100 > 3000); usage 0 at the end.
 * The driver's "used" attribute is the memory mapped into graphs, not what is allocated: equal
 * to the reserve at every step on an H200 (driver 580), frees included. A limiter that took it for
 * the allocated bytes would refuse B, which fits in what A left reserved. */
#include "path.h"

static CUgraphExec one_alloc_graph(size_t bytes, CUdeviceptr *dptr, CUgraph *g)
{
    CUgraphExec x = NULL;
    CUgraphNode n;
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = 0;
    p.bytesize = bytes;
    CU(cuGraphCreate(g, 0));
    CU(cuGraphAddMemAllocNode(&n, *g, NULL, 0, &p));
    *dptr = p.dptr;
    CU(cuGraphInstantiateWithFlags(&x, *g, 0));
    return x;
}

static unsigned long long graph_attr_mib(CUgraphMem_attribute a)
{
    cuuint64_t v = 0;
    cuDeviceGetGraphMemAttribute(0, a, &v);
    return v / MIB;
}

static unsigned long long graph_reserved_mib(void) { return graph_attr_mib(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT); }

/* The pool's figures at each step, for comparing a driver with fakegpu (not asserted here). */
static void show_pool(const char *when)
{
    printf("info graph pool after %s: reserved %llu MiB, used %llu MiB, free %llu MiB\n", when, graph_reserved_mib(),
           graph_attr_mib(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), free_mib());
}

/* The graphs and executable graphs A..F, destroyed together at the end. */
enum { A, B, C, D, E, F, NGRAPHS };
static CUgraph g[NGRAPHS];
static CUgraphExec x[NGRAPHS];

/* A, captured: its allocation takes no memory until the launch reserves it in the graph pool. */
static void captured(CUstream s, CUfunction k, unsigned long long start)
{
    CUdeviceptr pa;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CU(cuStreamIsCapturing(s, &st));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE, "stream is capturing");
    CU(cuMemAllocAsync(&pa, 2000 * MIB, s));
    CU(cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
    CU(cuMemFreeAsync(pa, s));
    CU(cuStreamEndCapture(s, &g[A]));
    unsigned long long f = free_mib();
    EXPECT(path_limited ? f == path_limit_mib : near(f, start, NATIVE_TOL), "capture takes no memory: free %llu MiB", f);
    CU(cuGraphInstantiateWithFlags(&x[A], g[A], 0));
    CU(cuGraphLaunch(x[A], s));
    CU(cuStreamSynchronize(s));
    show_pool("A");
    EXPECT(graph_attr_mib(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == graph_reserved_mib(),
           "after A the driver reports its freed memory as used (mapped): %llu MiB", graph_attr_mib(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT));
    f = free_mib();
    EXPECT(graph_reserved_mib() >= 2000, "graph pool reserves %llu MiB after A", graph_reserved_mib());
    if (path_limited)
        EXPECT(near(f, path_limit_mib - 2000, NATIVE_TOL), "free %llu MiB after A: its memory counts", f);
    else
        EXPECT(near(start - f, 2000, NATIVE_TOL), "free dropped by %llu MiB after A", start - f);
}

/* B reuses A's reserve; C's does not fit under the limit; B's allocation is freed outside it. */
static void reuse_then_refuse(CUstream s)
{
    CUdeviceptr pb, pc;
    x[B] = one_alloc_graph(1500 * MIB, &pb, &g[B]);
    CU(cuGraphLaunch(x[B], s)); /* reuses A's reserve */
    CU(cuStreamSynchronize(s));
    show_pool("B");
    EXPECT(graph_reserved_mib() < 2000 + 1500, "B reused A's reserve: %llu MiB reserved", graph_reserved_mib());
    x[C] = one_alloc_graph(1600 * MIB, &pc, &g[C]);
    CUresult r = cuGraphLaunch(x[C], s);
    if (path_limited) {
        EXPECT(r == CUDA_ERROR_OUT_OF_MEMORY, "C's launch refused: 1500 in use + 1600 > the limit (%d)", r);
    } else {
        EXPECT(r == CUDA_SUCCESS, "C's launch granted (%d)", r);
        CU(cuStreamSynchronize(s));
        show_pool("C");
        CU(cuMemFree(pc));
    }
    CU(cuMemFree(pb)); /* a graph allocation freed outside its graph */
    show_pool("the frees");
}

/* D allocates 1500 MiB that outlive it; E, another graph, frees them. F's 2500 MiB then fit
 * in the reserve plus the rest of the limit: a limiter that missed E's free would refuse F. */
static void freed_by_another_graph(CUstream s)
{
    CUdeviceptr pd, pf;
    CUgraphNode fn;
    x[D] = one_alloc_graph(1500 * MIB, &pd, &g[D]);
    CU(cuGraphLaunch(x[D], s));
    CU(cuGraphCreate(&g[E], 0));
    CU(cuGraphAddMemFreeNode(&fn, g[E], NULL, 0, pd));
    CU(cuGraphInstantiateWithFlags(&x[E], g[E], 0));
    CU(cuGraphLaunch(x[E], s));
    CU(cuStreamSynchronize(s));
    x[F] = one_alloc_graph(2500 * MIB, &pf, &g[F]);
    CU(cuGraphLaunch(x[F], s)); /* limited: A's reserve, grown by ~500 MiB, stays within 3000 */
    CU(cuStreamSynchronize(s));
    show_pool("F");
    CU(cuMemFree(pf));
}

int main(void)
{
    path_begin();
    path_ctx();
    CUfunction k = path_kernel();
    unsigned long long start = free_mib();
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    captured(s, k, start);
    reuse_then_refuse(s);
    freed_by_another_graph(s);
    for (int i = 0; i < NGRAPHS; i++)
        CU(cuGraphExecDestroy(x[i]));
    for (int i = 0; i < NGRAPHS; i++)
        CU(cuGraphDestroy(g[i]));
    CU(cuCtxSynchronize());
    show_pool("the destroys");
    CU(cuDeviceGraphMemTrim(0));
    EXPECT(graph_reserved_mib() == 0, "graph pool reserves %llu MiB after the trim", graph_reserved_mib());
    CU(cuStreamDestroy(s));
    expect_all_released(start);
    return path_end("graph-memory-nodes");
}
