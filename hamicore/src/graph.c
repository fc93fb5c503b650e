/*
 * Graph memory nodes: an executable graph's allocation nodes take physical memory from the
 * device's graph memory pool when it is uploaded or launched (the driver's semantics), and the
 * pool keeps it reserved until cuDeviceGraphMemTrim. Charged by that reserve (reserve.c).
 *
 * At instantiation the graph's allocation nodes are summed (cuGraphGetNodes, node types, their
 * parameters): an upload or a launch is refused with CUDA_ERROR_OUT_OF_MEMORY, before the driver
 * is called, when the growth of the pool it may cause does not fit the limit. Graphs of more
 * than 1024 nodes or more than 1024 live executable graphs are not pre-checked (logged once):
 * their memory is still charged after the launch, from the driver's figure.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "context.h"
#include "init.h"
#include "limiter.h"
#include "log.h"
#include "memory.h"
#include "region.h"
#include "reserve.h"
#include "symbols.h"

#define MAX_EXECS 1024
#define MAX_NODES 1024

struct exec_rec {
    CUgraphExec x;
    uint64_t bytes;
    int dev;
};

static struct exec_rec g_execs[MAX_EXECS];
static int g_nexecs;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_logged;

static void prepare(void) { pthread_mutex_lock(&g_mu); }
static void parent(void) { pthread_mutex_unlock(&g_mu); }
static void child(void)
{
    g_nexecs = 0;
    pthread_mutex_unlock(&g_mu); /* held by the forking thread (prepare) */
}
static void __attribute__((constructor(101))) graph_register_fork(void) { pthread_atfork(prepare, parent, child); }

static int enforcing(void) { return !lb_guard && lb_active(); }

static void __attribute__((noinline, cold)) log_once(const char *what)
{
    if (!atomic_exchange(&g_logged, 1))
        LB_WARN("%s: its graph memory is charged after each launch but not checked before", what);
}

/* Sum the allocation nodes of g and remember them for x. Runs with the guard up. */
static void remember(CUgraphExec x, CUgraph g)
{
    __typeof__(&cuGraphGetNodes) nodes = LB_REAL(cuGraphGetNodes);
    __typeof__(&cuGraphNodeGetType) type = LB_REAL(cuGraphNodeGetType);
    __typeof__(&cuGraphMemAllocNodeGetParams) params = LB_REAL(cuGraphMemAllocNodeGetParams);
    CUgraphNode buf[MAX_NODES];
    size_t n = MAX_NODES;
    if (!nodes || !type || !params || nodes(g, buf, &n) != CUDA_SUCCESS)
        return;
    if (n > MAX_NODES) {
        log_once("a graph of more than 1024 nodes");
        return;
    }
    uint64_t bytes = 0;
    int dev = -1;
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType t;
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        if (type(buf[i], &t) != CUDA_SUCCESS || t != CU_GRAPH_NODE_TYPE_MEM_ALLOC || params(buf[i], &p) != CUDA_SUCCESS)
            continue;
        bytes += p.bytesize;
        dev = p.poolProps.location.id;
    }
    if (!bytes || dev < 0 || dev >= LB_REGION_MAX_DEVICES)
        return;
    pthread_mutex_lock(&g_mu);
    if (g_nexecs < MAX_EXECS)
        g_execs[g_nexecs++] = (struct exec_rec){x, bytes, dev};
    else
        log_once("more than 1024 executable graphs with memory nodes");
    pthread_mutex_unlock(&g_mu);
}

static int lookup(CUgraphExec x, struct exec_rec *out, int drop)
{
    int found = 0;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_nexecs; i++)
        if (g_execs[i].x == x) {
            *out = g_execs[i];
            if (drop)
                g_execs[i] = g_execs[--g_nexecs];
            found = 1;
            break;
        }
    pthread_mutex_unlock(&g_mu);
    return found;
}

#define REAL_OR_FAIL(w)                                                                                             \
    __typeof__(&w) real = LB_REAL(w);                                                                               \
    if (!real)                                                                                                      \
        return CUDA_ERROR_NOT_FOUND

/* Instantiation may upload (CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD): settled afterwards. */
static CUresult instantiated(CUresult r, CUgraphExec *px, CUgraph g)
{
    if (r == CUDA_SUCCESS && px)
        lb_graph_work_note(*px, g); /* its kernels, for the compute limit */
    if (r != CUDA_SUCCESS || !px || !enforcing())
        return r;
    lb_guard_enter();
    remember(*px, g);
    lb_guard_leave();
    struct exec_rec e;
    if (lookup(*px, &e, 0))
        lb_graph_settle(e.dev);
    return r;
}

LB_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *px, CUgraph g, unsigned long long flags)
{
    REAL_OR_FAIL(cuGraphInstantiateWithFlags);
    lb_guard_enter();
    CUresult r = real(px, g, flags);
    lb_guard_leave();
    return instantiated(r, px, g);
}

CUresult lbw_cuGraphInstantiate_v1(CUgraphExec *px, CUgraph g, CUgraphNode *err, char *log, size_t n)
{
    REAL_OR_FAIL(lbw_cuGraphInstantiate_v1);
    lb_guard_enter();
    CUresult r = real(px, g, err, log, n);
    lb_guard_leave();
    return instantiated(r, px, g);
}

LB_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *px, CUgraph g, CUgraphNode *err, char *log, size_t n)
{
    REAL_OR_FAIL(cuGraphInstantiate_v2);
    lb_guard_enter();
    CUresult r = real(px, g, err, log, n);
    lb_guard_leave();
    return instantiated(r, px, g);
}

LB_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *px, CUgraph g, void *params)
{
    REAL_OR_FAIL(cuGraphInstantiateWithParams);
    lb_guard_enter();
    CUresult r = real(px, g, params);
    lb_guard_leave();
    return instantiated(r, px, g);
}

/* Upload and launch: refused when the pool's possible growth does not fit. */
static CUresult run(CUgraphExec x, CUstream s, CUresult (*call)(CUgraphExec, CUstream), const char *api)
{
    struct exec_rec e;
    if (!enforcing() || !lookup(x, &e, 0))
        return call(x, s);
    if (!lb_region) {
        lb_log_no_region(api);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t growth = lb_graph_growth(e.dev, e.bytes);
    if (!lb_region_reserve(e.dev, growth) && !(lb_reserve_settle_all(e.dev) && lb_region_reserve(e.dev, growth))) {
        LB_WARN("%s: device %d: graph memory of %llu bytes refused: the container uses %llu of its %llu-byte limit", api,
                e.dev, (unsigned long long)e.bytes, (unsigned long long)lb_region_usage(e.dev),
                (unsigned long long)lb_region_limit(e.dev));
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    lb_guard_enter();
    CUresult r = call(x, s);
    lb_guard_leave();
    lb_region_release(e.dev, growth);
    lb_graph_settle(e.dev);
    return r;
}

LB_EXPORT CUresult cuGraphLaunch(CUgraphExec x, CUstream s)
{
    REAL_OR_FAIL(cuGraphLaunch);
    lb_graph_launch_throttle(x);
    return run(x, s, real, "cuGraphLaunch");
}

LB_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec x, CUstream s)
{
    REAL_OR_FAIL(cuGraphLaunch_ptsz);
    lb_graph_launch_throttle(x);
    return run(x, s, real, "cuGraphLaunch");
}

LB_EXPORT CUresult cuGraphUpload(CUgraphExec x, CUstream s)
{
    REAL_OR_FAIL(cuGraphUpload);
    return run(x, s, real, "cuGraphUpload");
}

LB_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec x, CUstream s)
{
    REAL_OR_FAIL(cuGraphUpload_ptsz);
    return run(x, s, real, "cuGraphUpload");
}

LB_EXPORT CUresult cuGraphExecDestroy(CUgraphExec x)
{
    REAL_OR_FAIL(cuGraphExecDestroy);
    struct exec_rec e;
    int known = enforcing() && lookup(x, &e, 1);
    lb_graph_work_forget(x);
    CUresult r = real(x);
    if (known)
        lb_graph_settle(e.dev);
    return r;
}

LB_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    REAL_OR_FAIL(cuDeviceGraphMemTrim);
    if (!enforcing())
        return real(dev);
    lb_guard_enter();
    CUresult r = real(dev);
    lb_guard_leave();
    lb_graph_settle(dev);
    return r;
}
