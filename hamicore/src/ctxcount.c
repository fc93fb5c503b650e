/*
 * Contexts beyond a process's first on a GPU. Every context takes device memory of its own (518 MiB
 * on an H200 with CUDA 13, 300 MiB on fakegpu); the limit does not charge a process's first
 * context on a GPU (the documented context allowance, docs/hamicore.md), but a process could
 * otherwise hold any number of them uncharged. So each further live context — created, or the
 * primary context next to created ones — is charged LB_CTX_CHARGE on its GPU before the driver
 * makes it, refused when that does not fit, and released when it is destroyed.
 *
 * Per GPU a count of this process's live contexts; created contexts are followed in a fixed table
 * (a full one refuses the creation), the primary context of each ordinal by whether the library
 * saw it come to life.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "ctxcount.h"
#include "devmap.h"
#include "guard.h"
#include "init.h"
#include "log.h"
#include "region.h"
#include "symbols.h"

#define MAX_CREATED 256
#define MAX_ORD 256

static _Atomic int g_nctx[LB_REGION_MAX_DEVICES];
static _Atomic int g_prim_live[MAX_ORD];
static struct {
    _Atomic uintptr_t ctx;
    int phys;
} g_created[MAX_CREATED];

static void child(void)
{
    /* The child has no contexts (the driver gives it none). */
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++)
        atomic_store(&g_nctx[d], 0);
    for (int o = 0; o < MAX_ORD; o++)
        atomic_store(&g_prim_live[o], 0);
    memset(g_created, 0, sizeof g_created);
}
static void __attribute__((constructor(101))) ctxcount_register_fork(void) { pthread_atfork(NULL, NULL, child); }

/* One more context on ordinal ord: 1 go ahead (*phys: its GPU, -1 not counted), 0 refused. */
int lb_ctx_birth(int ord, int *phys, const void *ra)
{
    *phys = -1;
    if (lb_guard) {
        if (lb_guarded(ra) == 0)
            return 1; /* the driver's own call */
        LB_WARN("context creation refused: called inside another CUDA call of the library (a signal handler?)");
        return 0;
    }
    /* Which GPU it is, asked now even when nothing is charged: NVML may not load later (the
     * program's descriptors may all be taken by then). */
    int p = lb_phys_index(ord);
    if (!lb_active() || !lb_region)
        return 1; /* nothing to charge against (every allocation is refused anyway) */
    if (p < 0 || p >= LB_REGION_MAX_DEVICES) {
        LB_WARN("context on CUDA device %d refused: the library cannot tell which GPU it is", ord);
        return 0;
    }
    if (atomic_fetch_add(&g_nctx[p], 1) >= 1 && !lb_region_reserve(p, LB_CTX_CHARGE)) {
        atomic_fetch_sub(&g_nctx[p], 1);
        LB_WARN("device %d: another context (charged %llu bytes) refused: the container uses %llu of its %llu-byte "
                "limit",
                p, (unsigned long long)LB_CTX_CHARGE, (unsigned long long)lb_region_usage(p),
                (unsigned long long)lb_region_limit(p));
        return 0;
    }
    *phys = p;
    return 1;
}

/* A context counted by lb_ctx_birth is gone (or was never made). */
void lb_ctx_death(int phys)
{
    if (phys < 0 || phys >= LB_REGION_MAX_DEVICES)
        return;
    if (atomic_fetch_sub(&g_nctx[phys], 1) >= 2)
        lb_region_release(phys, LB_CTX_CHARGE);
}

int lb_ctx_created_begin(int ord, int *phys, const void *ra)
{
    int free_slots = 0;
    for (int i = 0; i < MAX_CREATED && !free_slots; i++)
        free_slots = !atomic_load(&g_created[i].ctx);
    if (!free_slots) {
        LB_WARN("context creation refused: more than %d live created contexts", MAX_CREATED);
        return 0;
    }
    return lb_ctx_birth(ord, phys, ra);
}

void lb_ctx_created_end(CUresult r, CUcontext ctx, int phys)
{
    if (r != CUDA_SUCCESS || !ctx) {
        lb_ctx_death(phys);
        return;
    }
    for (int i = 0; i < MAX_CREATED; i++) {
        uintptr_t zero = 0;
        if (atomic_compare_exchange_strong(&g_created[i].ctx, &zero, (uintptr_t)ctx)) {
            g_created[i].phys = phys;
            return;
        }
    }
    /* A racing creation took the last place: this one stays counted (over, never under). */
}

void lb_ctx_destroyed(CUcontext ctx)
{
    for (int i = 0; i < MAX_CREATED; i++)
        if (atomic_load(&g_created[i].ctx) == (uintptr_t)ctx) {
            int phys = g_created[i].phys;
            atomic_store(&g_created[i].ctx, 0);
            lb_ctx_death(phys);
            return;
        }
}

/* The primary context: counted from the retain that makes it active to the release or reset
 * that destroys it. */
int lb_ctx_primary_begin(int ord, int *phys, int active, const void *ra)
{
    *phys = -1;
    if (ord < 0 || ord >= MAX_ORD || active || atomic_exchange(&g_prim_live[ord], 1))
        return 1;
    if (!lb_ctx_birth(ord, phys, ra)) {
        atomic_store(&g_prim_live[ord], 0);
        return 0;
    }
    if (*phys < 0)
        atomic_store(&g_prim_live[ord], 0); /* not counted: not ours to end */
    return 1;
}

void lb_ctx_primary_end(int ord, CUresult r, int phys)
{
    if (r == CUDA_SUCCESS || phys < 0)
        return;
    lb_ctx_death(phys);
    if (ord >= 0 && ord < MAX_ORD)
        atomic_store(&g_prim_live[ord], 0);
}

void lb_ctx_primary_gone(int ord)
{
    if (ord < 0 || ord >= MAX_ORD || !atomic_exchange(&g_prim_live[ord], 0))
        return;
    int p = lb_phys_index(ord);
    lb_ctx_death(p);
}
