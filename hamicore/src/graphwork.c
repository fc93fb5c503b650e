/*
 * The compute work of executable graphs: a graph launch starts all its kernel nodes at once, so
 * the gate paces it, without a scheduler, as their number and thread blocks (limiter.c), counted from the graph's
 * nodes when it is instantiated or updated (cuGraphExecUpdate) and remembered per CUgraphExec.
 * Child-graph nodes are counted through their graph (4 levels deep); a graph of more than 1024
 * nodes is counted from its first 1024 and scaled to its size. A graph this process did not see
 * instantiated (instantiated before the library was active) costs one kernel.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "ctxcache.h"
#include "gate.h"
#include "init.h"
#include "limiter.h"
#include "symbols.h"

#define MAX_EXECS 4096
#define MAX_NODES 1024
#define MAX_DEPTH 4

struct work {
    CUgraphExec x;
    uint64_t kernels, blocks;
};

static struct work g_work[MAX_EXECS];
static int g_n;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void prepare(void) { pthread_mutex_lock(&g_mu); }
static void parent(void) { pthread_mutex_unlock(&g_mu); }
static void child(void) { pthread_mutex_unlock(&g_mu); /* held by the forking thread (prepare) */ }
static void __attribute__((constructor(101))) graphwork_register_fork(void) { pthread_atfork(prepare, parent, child); }

static uint64_t sat_add(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

static void kernel_blocks(CUgraphNode n, uint64_t *blocks)
{
    __typeof__(&cuGraphKernelNodeGetParams_v2) get2 = LB_REAL(cuGraphKernelNodeGetParams_v2);
    __typeof__(&cuGraphKernelNodeGetParams) get1 = LB_REAL(cuGraphKernelNodeGetParams);
    CUDA_KERNEL_NODE_PARAMS_v2 p; /* the v1 layout is its prefix */
    if ((get2 && get2(n, &p) == CUDA_SUCCESS) || (get1 && get1(n, &p) == CUDA_SUCCESS)) {
        uint64_t b = (uint64_t)p.gridDimX * p.gridDimY;
        *blocks = sat_add(*blocks, __builtin_mul_overflow(b, (uint64_t)p.gridDimZ, &b) ? UINT64_MAX : b);
    } else {
        *blocks = sat_add(*blocks, 1);
    }
}

static void count(CUgraph g, int depth, uint64_t *kernels, uint64_t *blocks)
{
    __typeof__(&cuGraphGetNodes) nodes = LB_REAL(cuGraphGetNodes);
    __typeof__(&cuGraphNodeGetType) type = LB_REAL(cuGraphNodeGetType);
    __typeof__(&cuGraphChildGraphNodeGetGraph) child_of = LB_REAL(cuGraphChildGraphNodeGetGraph);
    CUgraphNode buf[MAX_NODES];
    size_t n = MAX_NODES;
    if (!nodes || !type || nodes(g, buf, &n) != CUDA_SUCCESS)
        return;
    uint64_t k = 0, b = 0;
    size_t seen = n < MAX_NODES ? n : MAX_NODES;
    for (size_t i = 0; i < seen; i++) {
        CUgraphNodeType t;
        CUgraph c;
        if (type(buf[i], &t) != CUDA_SUCCESS)
            continue;
        if (t == CU_GRAPH_NODE_TYPE_KERNEL) {
            k++;
            kernel_blocks(buf[i], &b);
        } else if (t == CU_GRAPH_NODE_TYPE_GRAPH && depth < MAX_DEPTH && child_of && child_of(buf[i], &c) == CUDA_SUCCESS) {
            count(c, depth + 1, &k, &b);
        }
    }
    if (n > seen && seen) { /* scale what the first MAX_NODES hold to the whole graph */
        k = k / seen * n + k % seen * n / seen;
        b = b / seen * n + b % seen * n / seen;
    }
    *kernels = sat_add(*kernels, k);
    *blocks = sat_add(*blocks, b);
}

static void put(CUgraphExec x, uint64_t kernels, uint64_t blocks)
{
    pthread_mutex_lock(&g_mu);
    int i = 0;
    while (i < g_n && g_work[i].x != x)
        i++;
    if (i == g_n && g_n < MAX_EXECS)
        g_n++;
    if (i < g_n)
        g_work[i] = (struct work){x, kernels, blocks};
    pthread_mutex_unlock(&g_mu); /* full: the graph costs one kernel per launch */
}

void lb_graph_work_note(CUgraphExec x, CUgraph g)
{
    if (!x || lb_guard || !lb_active())
        return;
    uint64_t k = 0, b = 0;
    lb_guard_enter();
    count(g, 0, &k, &b);
    lb_guard_leave();
    put(x, k, b);
}

void lb_graph_work_forget(CUgraphExec x)
{
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n; i++)
        if (g_work[i].x == x) {
            g_work[i] = g_work[--g_n];
            break;
        }
    pthread_mutex_unlock(&g_mu);
}

/* The graph's kernels and blocks, for the pacing without a scheduler. */
static void work_of(CUgraphExec x, uint64_t *k, uint64_t *b)
{
    *k = 1, *b = 1;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n; i++)
        if (g_work[i].x == x) {
            *k = g_work[i].kernels, *b = g_work[i].blocks;
            break;
        }
    pthread_mutex_unlock(&g_mu);
}

/* The slow path: 1 + the device when the launch must be followed by its marker; -1: refused (an
 * ordinal no gate can hold, lb_gate_beyond). */
static int __attribute__((noinline)) gate(CUgraphExec x, CUstream s, int per_thread)
{
    int dev, cur;
    if (lb_guard || (cur = lb_cur_device(&dev)) == LB_DEV_NONE)
        return 0;
    if (cur != 0)
        return -1; /* graph.c refuses it (lb_gate_beyond) */
    uint64_t k, b;
    work_of(x, &k, &b);
    if (!k)
        return 0; /* no kernel in it: nothing to gate */
    return lb_gate_enter(dev, s, per_thread, k, b) ? dev + 1 : 0;
}

int lb_graph_launch_throttle(CUgraphExec x, CUstream s, int per_thread)
{
    if (__builtin_expect(!lb_active(), 0))
        return 0;
    if (__builtin_expect(lb_launch_gated, 0))
        return lb_gate_pass() ? 0 : gate(x, s, per_thread);
    lb_mark_launch();
    return 0;
}

CUresult lb_graph_launched(int mark, CUresult r, CUstream s, int per_thread)
{
    if (__builtin_expect(mark != 0, 0) && r == CUDA_SUCCESS)
        lb_gate_after(mark - 1, s, per_thread);
    return r;
}

/* cuGraphExecUpdate: the executable graph takes the new graph's kernels. */
LB_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec x, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
    __typeof__(&cuGraphExecUpdate_v2) real = LB_REAL(cuGraphExecUpdate_v2);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(x, g, info);
    if (r == CUDA_SUCCESS)
        lb_graph_work_note(x, g);
    return r;
}

CUresult lbw_cuGraphExecUpdate_v1(CUgraphExec x, CUgraph g, CUgraphNode *err, CUgraphExecUpdateResult *res)
{
    __typeof__(&lbw_cuGraphExecUpdate_v1) real = LB_REAL(lbw_cuGraphExecUpdate_v1);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(x, g, err, res);
    if (r == CUDA_SUCCESS)
        lb_graph_work_note(x, g);
    return r;
}
