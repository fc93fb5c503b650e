#ifndef LB_REGION_INTERNAL_H
#define LB_REGION_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "limitbed/region.h"

struct lb_config; /* limitsfile.h */

/* The attached region: the pod's usage.cache, or a private memfd when that cannot be used (the
 * process then enforces its own limits alone). Non-NULL once lb_region_init has run. */
extern struct lb_region_header *lb_region;
/* This process's slot; NULL until claimed (again after fork: the child claims its own). */
extern _Atomic(struct lb_region_slot *) lb_region_slot;
/* This process's own limits (its limits file, or its environment in env mode): the region's
 * stamped limit is the container's to rewrite, so a process never enforces a looser one. */
extern uint64_t lb_own_limit[LB_REGION_MAX_DEVICES];
/* Why there is no region when lb_region is NULL (every allocation is refused), for the message. */
extern const char *lb_region_refusal;

void lb_region_init(const struct lb_config *cfg);
#ifdef LB_UNIT_TEST
/* What the forked child's atfork handler does (unit tests call it again): no slot until it claims
 * one, and the region mapped from an open file description of its own. Test build only. */
void lb_region_after_fork(void);
#endif
struct lb_region_slot *lb_region_claim(void);
/* region_stamp.c: a new region's header (fresh: the file reads as zeros already), and the ERROR
 * for a process whose limits differ from the region's (the lower one applies: region.h). */
void lb_region_stamp(struct lb_region_header *h, const struct lb_config *cfg, int fresh);
void lb_region_compare(const struct lb_region_header *h, const struct lb_config *cfg, const char *path);
/* Refused on the fast path: reclaim dead processes' memory and try once more (region.c). */
int lb_region_reserve_retry(int dev, uint64_t bytes);

static inline struct lb_region_slot *lb_region_mine(void)
{
    struct lb_region_slot *s = atomic_load_explicit(&lb_region_slot, memory_order_acquire);
    return __builtin_expect(s != NULL, 1) ? s : lb_region_claim();
}

/* Add bytes to the container total and to this process's slot. The total goes first and comes
 * off last (lb_region_unreserve), so a process killed between the two updates leaves the total
 * too high (reclaim subtracts only what its slot says): an over-count, never an under-count. */
static inline uint64_t lb_region_add(struct lb_region_slot *s, int dev, uint64_t bytes)
{
    uint64_t t = atomic_fetch_add(&lb_region->used_total[dev], bytes) + bytes;
    atomic_fetch_add_explicit(&s->used[dev], bytes, memory_order_relaxed);
    return t;
}

static inline void lb_region_sub(struct lb_region_slot *s, int dev, uint64_t bytes)
{
    atomic_fetch_sub_explicit(&s->used[dev], bytes, memory_order_relaxed);
    atomic_fetch_sub(&lb_region->used_total[dev], bytes);
}

/* Reserve bytes on a device for this process, atomically with respect to every thread and
 * process of the region: returns 1 if granted; 0 if it would exceed the limit. All reservations of a device go through one shared counter: each adds first
 * and checks the value its own atomic add returned, so the granted ones never sum above the
 * limit; two racing for the last bytes may both be refused, never both granted. */
/* The limit in force: the tighter of the region's and this process's own. */
static inline uint64_t lb_region_limit_of(int dev)
{
    uint64_t r = atomic_load_explicit((_Atomic uint64_t *)&lb_region->mem_limit[dev], memory_order_relaxed);
    return r < lb_own_limit[dev] ? r : lb_own_limit[dev];
}

static inline int lb_region_reserve(int dev, uint64_t bytes)
{
    struct lb_region_slot *s = lb_region_mine();
    uint64_t lim = lb_region_limit_of(dev);
    if (__builtin_expect(bytes <= lim, 1)) {
        uint64_t t = lb_region_add(s, dev, bytes);
        if (__builtin_expect(t <= lim && t >= bytes, 1)) /* t < bytes: the counter wrapped */
            return 1;
        lb_region_sub(s, dev, bytes);
    }
    return lb_region_reserve_retry(dev, bytes);
}

static inline void lb_region_release(int dev, uint64_t bytes)
{
    lb_region_sub(lb_region_mine(), dev, bytes);
}

/* Bytes in use on a device by every process of the region. */
static inline uint64_t lb_region_usage(int dev)
{
    return lb_region ? atomic_load(&lb_region->used_total[dev]) : 0;
}

static inline uint64_t lb_region_limit(int dev)
{
    return lb_region ? lb_region_limit_of(dev) : LB_MEM_UNLIMITED;
}

#endif
