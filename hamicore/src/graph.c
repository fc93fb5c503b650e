/*
 * Graph memory nodes: an executable graph's allocation nodes take physical memory from the
 * device's graph memory pool when it is uploaded or launched (the driver's semantics), and the
 * pool keeps it reserved until cuDeviceGraphMemTrim. Charged by that reserve (reserve.c).
 *
 * At instantiation the graph's memory nodes are read (cuGraphGetNodes, node types, their
 * parameters): an upload or a launch is refused with CUDA_ERROR_OUT_OF_MEMORY, before the driver
 * is called, when the growth of the pool it may cause does not fit the limit. What the pool can
 * give without growing is its reserve less the graph allocations that are live outside any graph
 * (allocated by a graph without a free node of that graph, not yet freed): memory that a graph
 * allocated and freed within itself stays mapped to that graph, and the real driver counts it as
 * "used", but it is reused by the next graph. Those live allocations are followed here: added
 * after a launch, dropped by cuMemFree/cuMemFreeAsync, by another graph's free node, or with
 * their context. A graph of more than 8 memory nodes of one kind to follow, or launched while
 * 1024 such allocations are live, is pre-checked by the driver's "used" figure instead (refused
 * early rather than late), and so is every later graph of its device in the process. A graph of
 * any number of nodes is read (more than 1024: into memory mapped for it); one that cannot be read,
 * or beyond 1024 live executable graphs with memory nodes, is not instantiated
 * (CUDA_ERROR_OUT_OF_MEMORY): its launches could not be checked. Memory is charged after each
 * launch either way, from the driver's reserve.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "ctxcache.h"
#include "context.h"
#include "devmap.h"
#include "gate.h"
#include "graph.h"
#include "init.h"
#include "limiter.h"
#include "log.h"
#include "noregion.h"
#include "region.h"
#include "reserve.h"
#include "symbols.h"

#define MAX_EXECS 1024
#define MAX_NODES 1024
#define MAX_ESC 8    /* escaping allocations (or foreign frees) followed per executable graph */
#define MAX_LIVE 1024 /* escaping allocations live at once, per process */

struct ptr_size {
    CUdeviceptr p;
    uint64_t size;
};

struct exec_rec {
    CUgraphExec x;
    uint64_t bytes; /* all its allocation nodes */
    int dev;        /* the CUDA ordinal its allocation nodes are on (the driver's calls) */
    int phys;       /* its GPU (the region's index), -1: not known */
    int opaque;     /* too many memory nodes to follow: pre-checked by the driver's figure */
    int nesc, nfree;
    struct ptr_size esc[MAX_ESC]; /* allocated by the graph, not freed by it */
    CUdeviceptr frees[MAX_ESC];   /* freed by the graph, allocated elsewhere */
};

struct live {
    CUdeviceptr p;
    uint64_t size;
    int dev;
    uintptr_t ctx;
};

static struct exec_rec g_execs[MAX_EXECS];
static int g_nexecs;
static struct live g_live[MAX_LIVE];
static _Atomic int g_nlive; /* read without the lock by the free hooks' fast path */
static uint64_t g_live_bytes[LB_REGION_MAX_DEVICES];
static int g_live_lost[LB_REGION_MAX_DEVICES]; /* the table overflowed: fall back to the driver */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_logged;

static void prepare(void) { pthread_mutex_lock(&g_mu); }
static void parent(void) { pthread_mutex_unlock(&g_mu); }
static void child(void)
{
    g_nexecs = g_nlive = 0; /* graphs do not cross a fork */
    memset(g_live_bytes, 0, sizeof g_live_bytes);
    memset(g_live_lost, 0, sizeof g_live_lost);
    pthread_mutex_unlock(&g_mu); /* held by the forking thread (prepare) */
}
static void __attribute__((constructor(101))) graph_register_fork(void) { pthread_atfork(prepare, parent, child); }

/* 1 enforce, 0 pass through, -1 a signal handler inside one of our hooks (guard.h). */
static int enforcing(const void *ra)
{
    if (lb_guard)
        return lb_guarded(ra);
    return lb_active();
}

static void __attribute__((noinline, cold)) log_once(const char *what)
{
    if (!atomic_exchange(&g_logged, 1))
        LB_WARN("%s: its graph memory is charged after each launch but not checked before", what);
}

static int has_ptr(const CUdeviceptr *v, int n, CUdeviceptr p)
{
    for (int i = 0; i < n; i++)
        if (v[i] == p)
            return 1;
    return 0;
}

static int remember_nodes(CUgraphExec x, const CUgraphNode *buf, size_t n, __typeof__(&cuGraphNodeGetType) type,
                          __typeof__(&cuGraphMemAllocNodeGetParams) aparams,
                          __typeof__(&cuGraphMemFreeNodeGetParams) fparams);

/* Read the memory nodes of g and remember them for x; 0, or -1 when the graph cannot be read or
 * remembered (the instantiation is then refused: a graph whose memory nodes are not known
 * could not be checked at its launch). Runs with the guard up. */
static int remember(CUgraphExec x, CUgraph g)
{
    __typeof__(&cuGraphGetNodes) nodes = LB_REAL(cuGraphGetNodes);
    __typeof__(&cuGraphNodeGetType) type = LB_REAL(cuGraphNodeGetType);
    __typeof__(&cuGraphMemAllocNodeGetParams) aparams = LB_REAL(cuGraphMemAllocNodeGetParams);
    __typeof__(&cuGraphMemFreeNodeGetParams) fparams = LB_REAL(cuGraphMemFreeNodeGetParams);
    CUgraphNode small[MAX_NODES], *buf = small;
    size_t n = MAX_NODES, big = 0;
    if (!nodes || !type || !aparams || nodes(g, buf, &n) != CUDA_SUCCESS)
        return -1;
    if (n > MAX_NODES) {
        /* A large graph: its node list in memory of its own (mmap: no malloc in a hook). */
        big = n * sizeof *buf;
        buf = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        size_t got = n;
        if (buf == MAP_FAILED || nodes(g, buf, &got) != CUDA_SUCCESS || got != n) {
            if (buf != MAP_FAILED)
                munmap(buf, big);
            return -1;
        }
    }
    int rc = remember_nodes(x, buf, n, type, aparams, fparams);
    if (big)
        munmap(buf, big);
    return rc;
}

static int remember_nodes(CUgraphExec x, const CUgraphNode *buf, size_t n, __typeof__(&cuGraphNodeGetType) type,
                          __typeof__(&cuGraphMemAllocNodeGetParams) aparams,
                          __typeof__(&cuGraphMemFreeNodeGetParams) fparams)
{
    struct exec_rec e = {.x = x, .dev = -1, .opaque = !fparams};
    struct ptr_size allocs[MAX_ESC];
    CUdeviceptr frees[MAX_ESC];
    int na = 0, nf = 0;
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType t;
        if (type(buf[i], &t) != CUDA_SUCCESS)
            return -1;
        if (t == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            CUDA_MEM_ALLOC_NODE_PARAMS p;
            if (aparams(buf[i], &p) != CUDA_SUCCESS)
                return -1;
            e.bytes += p.bytesize;
            e.dev = p.poolProps.location.id;
            if (na < MAX_ESC)
                allocs[na++] = (struct ptr_size){p.dptr, p.bytesize};
            else
                e.opaque = 1;
        } else if (t == CU_GRAPH_NODE_TYPE_MEM_FREE && fparams) {
            CUdeviceptr p;
            if (fparams(buf[i], &p) != CUDA_SUCCESS)
                return -1;
            if (nf < MAX_ESC)
                frees[nf++] = p;
            else
                e.opaque = 1;
        }
    }
    for (int i = 0; i < na; i++)
        if (!has_ptr(frees, nf, allocs[i].p))
            e.esc[e.nesc++] = allocs[i];
    for (int i = 0; i < nf; i++) {
        int own = 0;
        for (int j = 0; j < na; j++)
            own |= allocs[j].p == frees[i];
        if (!own)
            e.frees[e.nfree++] = frees[i];
    }
    if (e.opaque)
        log_once("a graph of more than 8 allocation or free nodes");
    if (!e.bytes && !e.nfree)
        return 0;
    e.phys = e.dev >= 0 ? lb_phys_index(e.dev) : -1;
    if (e.phys >= LB_REGION_MAX_DEVICES)
        e.phys = -1;
    lb_lock(&g_mu);
    int ok = g_nexecs < MAX_EXECS;
    if (ok)
        g_execs[g_nexecs++] = e;
    lb_unlock(&g_mu);
    if (!ok)
        LB_WARN("graph instantiation refused: more than %d live executable graphs with memory nodes", MAX_EXECS);
    return ok ? 0 : -1;
}

/* Under g_mu. */
static void live_drop_at(int i)
{
    g_live_bytes[g_live[i].dev] -= g_live[i].size;
    g_live[i] = g_live[--g_nlive];
}

static int live_drop_locked(CUdeviceptr p)
{
    for (int i = 0; i < g_nlive; i++)
        if (g_live[i].p == p) {
            live_drop_at(i);
            return 1;
        }
    return 0;
}

/* After a successful launch of e: its escaping allocations are live, its foreign frees done. */
static void launched(const struct exec_rec *e)
{
    if (!e->nfree && !e->nesc && !e->opaque)
        return; /* the common captured graph: allocates and frees within itself */
    uintptr_t ctx = lb_cur_fresh() ? lb_cur_ctx() : 0;
    lb_lock(&g_mu);
    if (e->opaque && e->phys >= 0)
        g_live_lost[e->phys] = 1; /* allocations it leaves live are not all known: the driver's figure from now on */
    for (int i = 0; i < e->nfree; i++)
        (void)live_drop_locked(e->frees[i]);
    for (int i = 0; i < e->nesc; i++) {
        if (e->phys < 0)
            break;
        (void)live_drop_locked(e->esc[i].p); /* a relaunch after its free: the same address again */
        if (g_nlive == MAX_LIVE) {
            g_live_lost[e->phys] = 1;
            log_once("more than 1024 live graph allocations");
            break;
        }
        g_live[g_nlive++] = (struct live){e->esc[i].p, e->esc[i].size, e->phys, ctx};
        g_live_bytes[e->phys] += e->esc[i].size;
    }
    lb_unlock(&g_mu);
}

void lb_graph_ptr_freed(CUdeviceptr p)
{
    if (!atomic_load_explicit(&g_nlive, memory_order_relaxed))
        return;
    lb_lock(&g_mu);
    (void)live_drop_locked(p);
    lb_unlock(&g_mu);
}

static void graph_ctx_gone(uintptr_t ctx)
{
    lb_lock(&g_mu);
    for (int i = 0; i < g_nlive;)
        if (g_live[i].ctx == ctx)
            live_drop_at(i);
        else
            i++;
    lb_unlock(&g_mu);
}
static void __attribute__((constructor)) graph_ctx_gone_register(void) { lb_ctx_on_gone(LB_CTX_GONE_GRAPH, graph_ctx_gone); }

/* Bytes of graph allocations live outside their graphs on dev; UINT64_MAX: not known. */
static uint64_t live_bytes(const struct exec_rec *e)
{
    lb_lock(&g_mu);
    uint64_t v = e->opaque || g_live_lost[e->phys] ? UINT64_MAX : g_live_bytes[e->phys];
    lb_unlock(&g_mu);
    return v;
}

static int lookup(CUgraphExec x, struct exec_rec *out, int drop)
{
    int found = 0;
    lb_lock(&g_mu);
    for (int i = 0; i < g_nexecs; i++)
        if (g_execs[i].x == x) {
            *out = g_execs[i];
            if (drop)
                g_execs[i] = g_execs[--g_nexecs];
            found = 1;
            break;
        }
    lb_unlock(&g_mu);
    return found;
}


static CUresult refuse_exec(CUgraphExec x, CUresult why)
{
    __typeof__(&cuGraphExecDestroy) destroy = LB_REAL(cuGraphExecDestroy);
    if (destroy) {
        lb_guard_enter();
        (void)destroy(x);
        lb_guard_leave();
    }
    return why;
}

/* Instantiation may upload (CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD): settled afterwards. */
static CUresult instantiated(CUresult r, CUgraphExec *px, CUgraph g, const void *ra)
{
    int en = enforcing(ra);
    if (r == CUDA_SUCCESS && px && en < 0)
        return refuse_exec(*px, CUDA_ERROR_NOT_PERMITTED); /* a graph we could not read */
    if (r == CUDA_SUCCESS && px)
        lb_graph_work_note(*px, g); /* its kernels, for the compute limit */
    if (r != CUDA_SUCCESS || !px || en <= 0)
        return r;
    lb_guard_enter();
    int known = remember(*px, g);
    lb_guard_leave();
    if (known != 0)
        return refuse_exec(*px, CUDA_ERROR_OUT_OF_MEMORY);
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
    return instantiated(r, px, g, __builtin_return_address(0));
}

CUresult lbw_cuGraphInstantiate_v1(CUgraphExec *px, CUgraph g, CUgraphNode *err, char *log, size_t n)
{
    REAL_OR_FAIL(lbw_cuGraphInstantiate_v1);
    lb_guard_enter();
    CUresult r = real(px, g, err, log, n);
    lb_guard_leave();
    return instantiated(r, px, g, __builtin_return_address(0));
}

LB_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *px, CUgraph g, CUgraphNode *err, char *log, size_t n)
{
    REAL_OR_FAIL(cuGraphInstantiate_v2);
    lb_guard_enter();
    CUresult r = real(px, g, err, log, n);
    lb_guard_leave();
    return instantiated(r, px, g, __builtin_return_address(0));
}

LB_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *px, CUgraph g, void *params)
{
    REAL_OR_FAIL(cuGraphInstantiateWithParams);
    lb_guard_enter();
    CUresult r = real(px, g, params);
    lb_guard_leave();
    return instantiated(r, px, g, __builtin_return_address(0));
}

/* Upload and launch: refused when the pool's possible growth does not fit. */
static CUresult run(CUgraphExec x, CUstream s, CUresult (*call)(CUgraphExec, CUstream), const char *api, int launch,
                    const void *ra)
{
    struct exec_rec e;
    int en = enforcing(ra);
    if (en < 0)
        return CUDA_ERROR_NOT_PERMITTED; /* its memory could not be checked here */
    if (!en || !lookup(x, &e, 0))
        return call(x, s);
    CUresult r;
    if (!e.bytes) { /* only frees: nothing to check */
        lb_guard_enter();
        r = call(x, s);
        lb_guard_leave();
        if (r == CUDA_SUCCESS && launch)
            launched(&e);
        return r;
    }
    if (!lb_region) {
        lb_log_no_region(api);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (e.phys < 0) {
        LB_WARN("%s: CUDA device %d: graph memory refused: the library cannot tell which GPU it is", api, e.dev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t growth = lb_graph_growth(e.dev, e.bytes, live_bytes(&e));
    if (!lb_region_reserve(e.phys, growth) && !(lb_reserve_settle_all(e.phys) && lb_region_reserve(e.phys, growth))) {
        LB_WARN("%s: device %d: graph memory of %llu bytes refused: the container uses %llu of its %llu-byte limit", api,
                e.dev, (unsigned long long)e.bytes, (unsigned long long)lb_region_usage(e.phys),
                (unsigned long long)lb_region_limit(e.phys));
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    lb_guard_enter();
    r = call(x, s);
    lb_guard_leave();
    lb_region_release(e.phys, growth);
    lb_graph_settle(e.dev);
    if (r == CUDA_SUCCESS && launch)
        launched(&e);
    return r;
}

LB_EXPORT CUresult cuGraphLaunch(CUgraphExec x, CUstream s)
{
    REAL_OR_FAIL(cuGraphLaunch);
    int mark = lb_graph_launch_throttle(x, s, 0);
    if (mark < 0)
        return lb_gate_beyond();
    return lb_graph_launched(mark, run(x, s, real, "cuGraphLaunch", 1, __builtin_return_address(0)), s, 0);
}

LB_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec x, CUstream s)
{
    REAL_OR_FAIL(cuGraphLaunch_ptsz);
    int mark = lb_graph_launch_throttle(x, s, 1);
    if (mark < 0)
        return lb_gate_beyond();
    return lb_graph_launched(mark, run(x, s, real, "cuGraphLaunch", 1, __builtin_return_address(0)), s, 1);
}

LB_EXPORT CUresult cuGraphUpload(CUgraphExec x, CUstream s)
{
    REAL_OR_FAIL(cuGraphUpload);
    return run(x, s, real, "cuGraphUpload", 0, __builtin_return_address(0));
}

LB_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec x, CUstream s)
{
    REAL_OR_FAIL(cuGraphUpload_ptsz);
    return run(x, s, real, "cuGraphUpload", 0, __builtin_return_address(0));
}

LB_EXPORT CUresult cuGraphExecDestroy(CUgraphExec x)
{
    REAL_OR_FAIL(cuGraphExecDestroy);
    struct exec_rec e;
    int known = enforcing(__builtin_return_address(0)) > 0 && lookup(x, &e, 1);
    lb_graph_work_forget(x);
    CUresult r = real(x);
    if (known)
        lb_graph_settle(e.dev);
    return r;
}

LB_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    REAL_OR_FAIL(cuDeviceGraphMemTrim);
    if (enforcing(__builtin_return_address(0)) <= 0)
        return real(dev);
    lb_guard_enter();
    CUresult r = real(dev);
    lb_guard_leave();
    lb_graph_settle(dev);
    return r;
}
