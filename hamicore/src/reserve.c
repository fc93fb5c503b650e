/* Pool and graph reserves (reserve.h). Each known pool has a slot with the bytes charged for it;
 * settling exchanges that with the driver's current figure and moves the region by the
 * difference. Lock-free and without a lock across driver calls: two settles racing may apply
 * readings out of order for an instant; the next settle corrects it. Increases are added
 * unconditionally (the driver already holds the memory); refusals happen before the driver
 * call, against the growth the allocation may cause. */
#include "reserve.h"

#include <pthread.h>
#include <stdatomic.h>

#include "devmap.h"
#include "region.h"

#define MAX_POOLS 256
#define GONE ((uintptr_t)1) /* a destroyed pool's slot, free to take again */

struct pool_slot {
    _Atomic uintptr_t pool;
    _Atomic int dev;
    _Atomic uint64_t charged;
};

static struct pool_slot g_pools[MAX_POOLS];
/* Per GPU (region index): what its graph memory pool is charged, and the CUDA ordinal this
 * process asks the driver about it with. */
static _Atomic uint64_t g_graph_charged[LB_REGION_MAX_DEVICES];
static _Atomic int g_graph_ord[LB_REGION_MAX_DEVICES];

static struct pool_slot *find(uintptr_t p)
{
    for (int i = 0; p > GONE && i < MAX_POOLS; i++)
        if (atomic_load(&g_pools[i].pool) == p)
            return &g_pools[i];
    return NULL;
}

/* The pool's slot, made if need be; NULL when all are taken (its allocations are then refused). */
static struct pool_slot *slot_of(CUmemoryPool pool, int dev)
{
    uintptr_t p = (uintptr_t)pool;
    struct pool_slot *s = find(p);
    for (int i = 0; !s && p > GONE && i < MAX_POOLS; i++) {
        uintptr_t cur = atomic_load(&g_pools[i].pool);
        if ((cur == 0 || cur == GONE) && atomic_compare_exchange_strong(&g_pools[i].pool, &cur, p)) {
            atomic_store(&g_pools[i].charged, 0);
            atomic_store(&g_pools[i].dev, dev);
            s = &g_pools[i];
        }
    }
    return s;
}

int lb_pool_follow(CUmemoryPool pool, int dev) { return slot_of(pool, dev) != NULL; }

static void move_to(_Atomic uint64_t *charged, int dev, uint64_t now)
{
    uint64_t old = atomic_exchange(charged, now);
    if (now > old)
        lb_region_add(lb_region_mine(), dev, now - old);
    else if (old > now)
        lb_region_release(dev, old - now);
}

/* A pool the driver no longer knows (destroyed) holds nothing: it reads as 0. Only a driver
 * without the entry point leaves the figure unknown (-1). */
static int pool_attr(CUmemoryPool pool, CUmemPool_attribute a, uint64_t *v)
{
    __typeof__(&cuMemPoolGetAttribute) f = LB_REAL(cuMemPoolGetAttribute);
    *v = 0;
    if (!f)
        return -1;
    if (f(pool, a, v) != CUDA_SUCCESS)
        *v = 0;
    return 0;
}

uint64_t lb_pool_growth(CUmemoryPool pool, uint64_t bytes)
{
    uint64_t res, used;
    if (pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res) || pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used))
        return bytes; /* unknown: the allocation may need all of it */
    uint64_t spare = res > used ? res - used : 0;
    return bytes > spare ? bytes - spare : 0;
}

/* Pools charged more than nothing: what a synchronisation may have shrunk. */
static _Atomic int g_pools_held;

static void move_pool(struct pool_slot *s, uint64_t now)
{
    uint64_t old = atomic_load(&s->charged);
    move_to(&s->charged, atomic_load(&s->dev), now);
    if (!old != !now)
        atomic_fetch_add(&g_pools_held, now ? 1 : -1);
}

void lb_pool_settle(CUmemoryPool pool, int dev)
{
    uint64_t res;
    struct pool_slot *s;
    if (!lb_region || dev < 0 || dev >= LB_REGION_MAX_DEVICES || pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res) ||
        !(s = slot_of(pool, dev)))
        return; /* no figure or no slot: the allocations stay charged as they were */
    move_pool(s, res);
}

/* A synchronisation is where the driver gives a pool's unused memory back (down to its release
 * threshold): every pool of this process that holds a charge is read again then, so that memory
 * it gave back stops counting against the other processes of the pod too. One load when it
 * holds none. */
void lb_reserve_after_sync(void)
{
    if (!atomic_load_explicit(&g_pools_held, memory_order_relaxed) || !lb_region)
        return;
    for (int i = 0; i < MAX_POOLS; i++) {
        uintptr_t p = atomic_load(&g_pools[i].pool);
        if (p > GONE && atomic_load(&g_pools[i].charged))
            lb_pool_settle((CUmemoryPool)p, atomic_load(&g_pools[i].dev));
    }
}

static int graph_attr(int dev, CUgraphMem_attribute a, uint64_t *v)
{
    __typeof__(&cuDeviceGetGraphMemAttribute) f = LB_REAL(cuDeviceGetGraphMemAttribute);
    *v = 0;
    return f && f(dev, a, v) == CUDA_SUCCESS ? 0 : -1;
}

uint64_t lb_graph_growth(int dev, uint64_t bytes, uint64_t live)
{
    uint64_t res, used = live;
    if (graph_attr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &res) ||
        (live == UINT64_MAX && graph_attr(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used)))
        return bytes;
    uint64_t spare = res > used ? res - used : 0;
    return bytes > spare ? bytes - spare : 0;
}

void lb_graph_settle(int ord)
{
    uint64_t res;
    int phys = lb_phys_index(ord);
    if (!lb_region || phys < 0 || phys >= LB_REGION_MAX_DEVICES ||
        graph_attr(ord, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &res))
        return;
    atomic_store(&g_graph_ord[phys], ord);
    move_to(&g_graph_charged[phys], phys, res);
}

/* The pool is destroyed: what it was charged goes, and so does its slot. */
void lb_pool_forget(CUmemoryPool pool)
{
    struct pool_slot *s = find((uintptr_t)pool);
    if (!s || !lb_region)
        return;
    move_pool(s, 0);
    atomic_store(&s->pool, GONE);
}

int lb_reserve_settle_all(int dev)
{
    if (!lb_region || dev < 0 || dev >= LB_REGION_MAX_DEVICES)
        return 0;
    uint64_t before = lb_region_usage(dev);
    for (int i = 0; i < MAX_POOLS; i++) {
        uintptr_t p = atomic_load(&g_pools[i].pool);
        if (p > GONE && atomic_load(&g_pools[i].dev) == dev)
            lb_pool_settle((CUmemoryPool)p, dev);
    }
    if (atomic_load(&g_graph_charged[dev]))
        lb_graph_settle(atomic_load(&g_graph_ord[dev]));
    return lb_region_usage(dev) < before;
}

int lb_stream_capturing(CUstream s)
{
    __typeof__(&cuStreamIsCapturing) f = LB_REAL(cuStreamIsCapturing);
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return f && f(s, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* fork: the child has no pools or graphs of its own yet; its slot starts at 0. */
static void fork_child(void)
{
    for (int i = 0; i < MAX_POOLS; i++)
        atomic_store(&g_pools[i].pool, 0), atomic_store(&g_pools[i].charged, 0);
    atomic_store(&g_pools_held, 0);
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++)
        atomic_store(&g_graph_charged[d], 0);
}

static void __attribute__((constructor(101))) reserve_register_fork(void) { pthread_atfork(NULL, NULL, fork_child); }
