/*
 * The shared parts of the device-memory hooks (memory.c, mempool.c, ipc.c): the per-process
 * tables that match frees to allocations, and the one shape every allocation wrapper has.
 *
 * Tables: value -> (size, GPU, owner) in static memory: open addressing, lock-free (CAS on the
 * key), tombstones on removal, no allocation. Bounded: an allocation that would not find a place
 * is refused before the driver is called (table_take), never left uncharged or untracked.
 */
#ifndef LB_CHARGE_H
#define LB_CHARGE_H

#include <stdatomic.h>
#include <stdint.h>

#include "ctxcache.h"
#include "guard.h"
#include "init.h"
#include "noregion.h"
#include "region.h"
#include "reserve.h"
#include "symbols.h"

/* The allocation path's pieces go into each wrapper whole: called, their saved registers and
 * calls cost more than the rest of the bookkeeping (make -C hamicore bench). */
#define LB_HOT static inline __attribute__((always_inline))

#define K_EMPTY 0u
#define K_TOMB 1u
#define K_BUSY 2u /* claimed, being written: not an entry yet */
#define K_BIAS 3u /* key = value + K_BIAS */

/* kind: how the entry's bytes are charged (E_DIRECT: released by its free or with its context,
 * E_POOL: by its pool's reserve). */
enum { E_DIRECT = 0, E_POOL = 1 };

struct entry {
    _Atomic uint64_t key; /* value + K_BIAS; K_EMPTY / K_TOMB / K_BUSY */
    _Atomic uint64_t size;
    _Atomic uint64_t owner; /* E_DIRECT: the context it was allocated in; E_POOL: the pool */
    _Atomic int32_t dev;
    _Atomic int32_t kind;
};

/* Constant descriptors, so that the inlined lookups see the table size as a constant. A table
 * takes at most 7/8 of its entries (`live` counts them, taken before the driver is called), so an
 * allocation is refused rather than left untracked, and probing always finds a free entry. */
struct table {
    struct entry *e;
    uint32_t bits;
    const char *what;
    _Atomic int *full_logged;
    _Atomic uint32_t *live;
};

#define LB_PTR_BITS 16
#define LB_ARRAY_BITS 12
/* The tables live in charge.c. Declared hidden: -fvisibility=hidden covers definitions only, and
 * an extern the compiler may not assume is ours is read through the GOT (an instruction more on
 * every allocation and free). */
#define LB_TABLES_HIDDEN __attribute__((visibility("hidden")))
extern LB_TABLES_HIDDEN struct entry lb_ptr_e[1u << LB_PTR_BITS], lb_array_e[1u << LB_ARRAY_BITS];
extern LB_TABLES_HIDDEN _Atomic int lb_full_logged[2];
extern LB_TABLES_HIDDEN _Atomic uint32_t lb_table_live[2];
static const struct table g_ptrs = {lb_ptr_e, LB_PTR_BITS, "device pointers", &lb_full_logged[0], &lb_table_live[0]};
static const struct table g_arrays = {lb_array_e, LB_ARRAY_BITS, "CUDA arrays", &lb_full_logged[1], &lb_table_live[1]};

/* A key's first place in t (Fibonacci hashing); reserve.c's slot_of is a pool's, not this. */
LB_HOT uint32_t table_slot(const struct table *t, uint64_t k)
{
    return (uint32_t)((k * 0x9E3779B97F4A7C15ULL) >> (64 - t->bits));
}

void lb_table_log_full(const struct table *t) __attribute__((noinline, cold));

/* A place in the table for one more entry, taken before the driver is called: 0 when full. */
LB_HOT int table_take(const struct table *t)
{
    uint32_t cap = (1u << t->bits) / 8 * 7;
    if (__builtin_expect(atomic_fetch_add_explicit(t->live, 1, memory_order_relaxed) < cap, 1))
        return 1;
    atomic_fetch_sub_explicit(t->live, 1, memory_order_relaxed);
    lb_table_log_full(t);
    return 0;
}

LB_HOT void table_give(const struct table *t) { atomic_fetch_sub_explicit(t->live, 1, memory_order_relaxed); }

/* An entry is published only complete: the slot is claimed (K_BUSY) before its fields are
 * written, and its key is stored last, with release order. A racing thread that sees K_BUSY
 * moves on; no one can overwrite a live entry's fields. */
LB_HOT int track(const struct table *t, uint64_t value, uint64_t size, int dev, uint64_t owner, int kind)
{
    uint64_t k = value + K_BIAS;
    if (k < K_BIAS)
        return -1;
    uint32_t mask = (1u << t->bits) - 1, h = table_slot(t, k);
    for (uint32_t i = 0; i <= mask; i++) {
        struct entry *e = &t->e[(h + i) & mask];
        uint64_t cur = atomic_load_explicit(&e->key, memory_order_relaxed);
        if (cur != K_EMPTY && cur != K_TOMB)
            continue;
        if (!atomic_compare_exchange_strong_explicit(&e->key, &cur, K_BUSY, memory_order_acquire, memory_order_relaxed))
            continue;
        atomic_store_explicit(&e->size, size, memory_order_relaxed);
        atomic_store_explicit(&e->owner, owner, memory_order_relaxed);
        atomic_store_explicit(&e->dev, dev, memory_order_relaxed);
        atomic_store_explicit(&e->kind, kind, memory_order_relaxed);
        atomic_store_explicit(&e->key, k, memory_order_release);
        return 0;
    }
    lb_table_log_full(t); /* never: a place was taken for it */
    return -1;
}

struct found {
    uint64_t size, owner;
    int dev, kind;
};

LB_HOT int untrack(const struct table *t, uint64_t value, struct found *f)
{
    uint64_t k = value + K_BIAS;
    if (k < K_BIAS)
        return 0;
    uint32_t mask = (1u << t->bits) - 1, h = table_slot(t, k);
    for (uint32_t i = 0; i <= mask; i++) {
        struct entry *e = &t->e[(h + i) & mask];
        uint64_t cur = atomic_load_explicit(&e->key, memory_order_acquire);
        if (cur == K_EMPTY)
            return 0;
        if (cur != k)
            continue;
        f->size = atomic_load_explicit(&e->size, memory_order_relaxed);
        f->owner = atomic_load_explicit(&e->owner, memory_order_relaxed);
        f->dev = atomic_load_explicit(&e->dev, memory_order_relaxed);
        f->kind = atomic_load_explicit(&e->kind, memory_order_relaxed);
        if (atomic_compare_exchange_strong(&e->key, &cur, K_TOMB)) {
            table_give(t);
            return 1;
        }
        return 0; /* freed concurrently by another thread: the other one accounts it */
    }
    return 0;
}

/* The shape every allocation wrapper shares:
 *     st = charge_*(&c, ...)        pass through uncharged / refused / reserved
 *     guarded driver call           (lb_guard_enter/leave around it)
 *     return charge_settle(...)     roll back on failure, track the new handle on success
 * The driver is called with the reentrancy guard up: a driver whose entry points call each other
 * through their exported names (e.g. an _ptsz variant calling the plain one) reaches our wrappers
 * again, and those must pass straight through instead of counting twice. */
enum { CH_PASS, CH_REFUSED, CH_HELD };

struct charge {
    int dev;
    uint64_t bytes;
    uint64_t owner;
    int kind;
};

/* 1: enforce; 0: pass through (not active, or the driver calling its own entry point: ra, the
 * wrapper's return address, is in the driver); -1: a call made while this thread is inside one of
 * our hooks by anything but the driver — a signal handler — which the allocation paths refuse
 * (guard.h). */
extern LB_TABLES_HIDDEN _Atomic int lb_mem_stale;
void lb_mem_clear_stale(void) __attribute__((noinline, cold));
void lb_log_reentered(const char *api) __attribute__((noinline, cold));
void lb_log_refusal(const char *api, int dev, uint64_t bytes) __attribute__((noinline, cold));
void lb_log_unplaced(const char *api) __attribute__((noinline, cold));

LB_HOT int enforcing(const void *ra)
{
    if (__builtin_expect(lb_guard, 0))
        return lb_guarded(ra);
    if (!lb_active())
        return 0;
    if (__builtin_expect(atomic_load_explicit(&lb_mem_stale, memory_order_acquire), 0))
        lb_mem_clear_stale();
    return 1;
}

/* Reserve on a known device. */
LB_HOT int charge_dev(struct charge *c, const char *api, int dev, uint64_t bytes)
{
    c->dev = dev;
    c->bytes = bytes;
    c->owner = 0;
    c->kind = E_DIRECT;
    if (__builtin_expect(!lb_region, 0)) {
        lb_log_no_region(api);
        return CH_REFUSED;
    }
    if (lb_region_reserve(dev, bytes))
        return CH_HELD;
    /* Pools and graphs are charged by what the driver holds reserved, read at their own calls;
     * memory they gave back since (at a synchronisation) may be what is in the way. */
    if (lb_reserve_settle_all(dev) && lb_region_reserve(dev, bytes))
        return CH_HELD;
    lb_log_refusal(api, dev, bytes);
    return CH_REFUSED;
}

/* Reserve on the GPU of the current context; no context: pass through (the driver refuses); a
 * device that cannot be placed on a GPU: refused. */
LB_HOT int charge_cur(struct charge *c, const char *api, uint64_t bytes, const void *ra)
{
    int phys, ord;
    int e = enforcing(ra);
    if (__builtin_expect(e <= 0, 0)) {
        if (e == 0)
            return CH_PASS;
        lb_log_reentered(api);
        return CH_REFUSED;
    }
    int cur = lb_cur_mem(&phys, &ord);
    if (__builtin_expect(cur != 0, 0)) {
        if (cur == LB_CUR_NONE)
            return CH_PASS;
        lb_log_unplaced(api);
        return CH_REFUSED;
    }
    int st = charge_dev(c, api, phys, bytes);
    c->owner = lb_cur_ctx();
    return st;
}

/* The driver handed out a value the table still has: that entry's allocation is gone (freed with
 * its context behind our back, or a pool's given back at a reset), so its charge goes too —
 * otherwise the new allocation's free would find the stale entry first. */
LB_HOT void forget_stale(const struct table *t, uint64_t value)
{
    struct found f;
    if (__builtin_expect(untrack(t, value, &f), 0) && f.kind == E_DIRECT)
        lb_region_release(f.dev, f.size);
}

/* A reservation and a table place are held (charge_*, table_take): roll both back when the driver
 * failed, else track the new value in the place taken for it. */
LB_HOT CUresult charge_settle(const struct charge *c, const struct table *t, CUresult r, uint64_t value)
{
    if (r != CUDA_SUCCESS) {
        lb_region_release(c->dev, c->bytes);
        table_give(t);
    } else {
        forget_stale(t, value);
        (void)track(t, value, c->bytes, c->dev, c->owner, c->kind);
    }
    return r;
}

/* charge_cur and a place in the table, before the driver is called. */
LB_HOT int charge_take(struct charge *c, const struct table *t, const char *api, uint64_t bytes,
                              const void *ra)
{
    int st = charge_cur(c, api, bytes, ra);
    if (st == CH_HELD && __builtin_expect(!table_take(t), 0)) {
        lb_region_release(c->dev, c->bytes);
        return CH_REFUSED;
    }
    return st;
}

/* Frees: 1 if the value was ours to account (then the driver is called guarded). */
LB_HOT int uncharge_begin(struct charge *c, const struct table *t, uint64_t value, const void *ra)
{
    struct found f;
    /* A free in a signal handler inside a hook is accounted like any other (the tables are
     * lock-free): only the driver's own calls are passed through. */
    if (!enforcing(ra) || !untrack(t, value, &f))
        return 0;
    c->bytes = f.size, c->dev = f.dev, c->owner = f.owner, c->kind = f.kind;
    return 1;
}

LB_HOT CUresult uncharge_settle(const struct charge *c, const struct table *t, uint64_t value, CUresult r)
{
    if (r != CUDA_SUCCESS) {
        if (table_take(t)) /* still allocated: followed again (no place: stays charged, over-counted) */
            (void)track(t, value, c->bytes, c->dev, c->owner, c->kind);
    }
    else if (c->kind == E_POOL)
        lb_pool_settle((CUmemoryPool)(uintptr_t)c->owner, c->dev); /* back to its pool */
    else
        lb_region_release(c->dev, c->bytes);
    return r;
}


#endif
