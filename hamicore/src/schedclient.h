/* The library's side of the node scheduler's protocol (limitbed/sched.h; the node's side is
 * plugin/schedproto): the grant file mapped read-only, the report file this container's processes
 * share, and the report's words. The launch gate (gate.c) decides with them. */
#ifndef LB_SCHEDCLIENT_H
#define LB_SCHEDCLIENT_H

#include <stdatomic.h>
#include <stdint.h>

#include "limitbed/sched.h"

/* lb_grant: NULL when the container has no grant file (no scheduler on the node, bare Docker, an
 * older plugin): the library paces itself. lb_report: NULL when no report could be made (something
 * else in its place): launches still follow the grant, and nothing is reported (the node reads
 * such a container as always busy). */
extern const struct lb_sched_grant *lb_grant;
extern struct lb_sched_report *lb_report;
/* The grant file's inode: the same for every process of the container, another for each container
 * (the phase of the slices a container keeps to while the scheduler is away: gate.c). */
extern uint64_t lb_grant_ino;

/* Maps the grant file read-only and creates/maps the report (libvgpu.so passes the compiled-in
 * LB_SCHED_GRANT_PATH and LB_SCHED_REPORT_PATH; the unit tests their own). 1: scheduled. */
int lb_sched_attach(const char *grant_path, const char *report_path);
#ifdef LB_UNIT_TEST
/* Unmaps both (unit tests; not part of libvgpu.so). */
void lb_sched_detach(void);
#endif

/* The entry of the GPU with this UUID, -1 if the grant file does not name it. */
int lb_sched_entry(const uint8_t uuid[16]);

static inline const _Atomic uint32_t *lb_sched_word(int e)
{
    return (const _Atomic uint32_t *)&lb_grant->gpu[e].word;
}

static inline uint32_t lb_sched_beat(int e)
{
    return atomic_load_explicit((const _Atomic uint32_t *)&lb_grant->gpu[e].beat, memory_order_relaxed);
}

static inline uint32_t lb_sched_grant_id(int e)
{
    return atomic_load_explicit((const _Atomic uint32_t *)&lb_grant->gpu[e].grant_id, memory_order_acquire);
}

/* The join word's arithmetic: a process joins slice g (the first join of a slice starts it
 * afresh), a process that joined g drains it. Both saturate; a drain of another slice than the
 * word's changes nothing. */
uint64_t lb_join_add(uint64_t j, uint32_t g);
uint64_t lb_join_drain(uint64_t j, uint32_t g);

/* Report words of entry e (shared by every process of the container). A join and a drain also
 * ring the bell: the scheduler sleeps on it while it waits for the holder's first launch (the
 * slice is charged from then) and for its drain. */
void lb_sched_join(int e, uint32_t g);
void lb_sched_drained(int e, uint32_t g);
void lb_sched_want(int e);
void lb_sched_active(int e, uint32_t seq);

/* Futex on a word of a shared file mapping (read-only is enough to wait): sleeps while *w == v,
 * at most ns. */
void lb_futex_wait(const _Atomic uint32_t *w, uint32_t v, int64_t ns);
void lb_futex_wake(const _Atomic uint32_t *w);

#endif
