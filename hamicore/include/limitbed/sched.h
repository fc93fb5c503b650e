/*
 * The binary layout of the compute scheduler's two files (docs/hamicore.md, "Compute limit"):
 *
 *   grant file   node -> container. Written by the node's scheduler (vgpu-scheduler), created by
 *                the device plugin at Allocate, mounted read-only at LB_SCHED_GRANT_PATH. Says, per
 *                GPU of the container, whether its processes may launch now.
 *   report file  container -> node. Created by libvgpu.so at LB_SCHED_REPORT_PATH in the
 *                container's read-write cache directory; the scheduler maps it read-only and treats
 *                every word as hostile: what a container writes here can only change what the
 *                scheduler decides for that container.
 *
 * This header is the single source of truth for both layouts: libvgpu.so includes it, and
 * plugin/schedproto (the scheduler's side, one package) is held to it by a test that compiles a
 * program printing every offset (plugin/schedproto/testdata/layout.c). Both files are one page; an
 * entry is one cache line, so launchers of two GPUs never share a line. Integers are in the byte
 * order of the machine (node and container share it).
 *
 * Changing an offset, a size or a meaning requires a new LB_SCHED_VERSION. Giving a reserved field
 * (zero in every file, read by nobody) a meaning that the readers of the version need not know
 * does not: allowed_us below.
 */
#ifndef LIMITBED_SCHED_H
#define LIMITBED_SCHED_H

#include <stddef.h>
#include <stdint.h>

/* "LBSCHED\0" and "LBREPORT" read as little-endian 64-bit integers. */
#define LB_SCHED_GRANT_MAGIC 0x004445484353424CULL
#define LB_SCHED_REPORT_MAGIC 0x54524F504552424CULL
#define LB_SCHED_VERSION 1u
#define LB_SCHED_MAX_GPUS 16
#define LB_SCHED_FILE_SIZE 4096u

/* Container paths, compiled in like /overrideEnv: a process finds them without any environment
 * (login sessions too), and no variable a process sets can point it elsewhere. */
#define LB_SCHED_GRANT_PATH "/usr/local/vgpu/sched.grant"
#define LB_SCHED_REPORT_PATH "/usr/local/vgpu/sched.report"

/* grant word: (sequence << LB_GRANT_SEQ_SHIFT) | state. The scheduler bumps the sequence on every
 * write, so a launcher that saw the word knows whether anything changed since; it stays the same
 * for the whole of a slice, which is what the launch path compares. The entry's beat is bumped
 * every few milliseconds instead: a beat that stops moving means a scheduler that stopped. */
#define LB_GRANT_STATE_MASK 3u
#define LB_GRANT_SEQ_SHIFT 2
#define LB_GRANT_OFF 0u  /* the scheduler does not drive this GPU for this container: pace alone */
#define LB_GRANT_WAIT 1u /* another container's turn: launches wait (a new file's state: until the
                          * scheduler's first word, or 0.5 s of a silent heartbeat) */
#define LB_GRANT_RUN 2u  /* this container's slice (grant_id names it): launch, report the drain */
#define LB_GRANT_FREE 3u /* not held (policy, no contender): launch freely */

/* One GPU of the container, in the container's device order (the plugin's record). */
struct lb_sched_grant_entry {
    uint8_t uuid[16];           /*  0  the GPU's UUID as cuDeviceGetUuid returns it; zero = unused */
    uint32_t word;              /* 16  state and sequence (above); accessed atomically */
    uint32_t grant_id;          /* 20  RUN: the slice's id, nonzero; written before the word */
    uint32_t budget_us;         /* 24  RUN: the slice's planned length, in µs (0: until revoked); the
                                 *      library's queue bound follows what is left of it */
    uint32_t beat;              /* 28  the scheduler's heartbeat: bumped every 10 ms */
    uint64_t allowed_us;        /* 32  the GPU time the container was allowed here, in µs (below);
                                 *      the node's monitor reads it, the library never does */
    uint32_t allowed_beat;      /* 40  the beat when allowed_us was last brought up to date */
    uint32_t reserved[5];       /* 44 */
};                              /* 64 */

/* allowed_us counts, while the scheduler drives the entry, the time the container was allowed to
 * run work on the GPU: its slices (RUN) and its free time (FREE) by the wall clock, and, past a
 * revoked slice, its drain and overlap as the scheduler charged them (docs/plugin.md, "Compute
 * outside the slices"). It only grows; a restarted scheduler goes on from the value it finds. A
 * process of the container that does GPU work beyond it does not obey the grant: the node's monitor
 * holds the driver's per-process figures to it. Before every beat the scheduler brings allowed_us up
 * to date, then sets allowed_beat to the beat it is about to write: a reader trusts allowed_us only
 * while allowed_beat keeps up with beat (a scheduler that predates the field beats and leaves it 0).
 *
 * Both fields were reserved (zero, never read) in version 1, and the library still never reads
 * them: a library, a plugin or a scheduler of either kind reads every other field as before, so
 * the version stays 1. */

struct lb_sched_grant {
    uint64_t magic;             /*   0  LB_SCHED_GRANT_MAGIC */
    uint32_t version;           /*   8  LB_SCHED_VERSION */
    uint32_t ngpus;             /*  12  entries in use (the container's GPUs) */
    uint32_t period_us;         /*  16  the scheduler's period: a waiting launcher gets its slice within it */
    uint32_t reserved[11];      /*  20 */
    struct lb_sched_grant_entry gpu[LB_SCHED_MAX_GPUS]; /* 64 */
};                              /* 1088, in a LB_SCHED_FILE_SIZE file */

/* report join word: (grant_id << 32) | (joins << 16) | drains. A process that starts launching
 * under slice grant_id adds a join (the first one of a slice resets the word); when its work of
 * that slice has finished (the slice was revoked, or it went idle) it adds a drain. joins ==
 * drains: nothing of the container runs under that slice. Both saturate at 0xffff. */
#define LB_JOIN_GRANT_SHIFT 32
#define LB_JOIN_JOINS_SHIFT 16
#define LB_JOIN_COUNT_MASK 0xffffu

struct lb_sched_report_entry {
    uint64_t join;              /*  0  slice, joins, drains (above) */
    uint32_t want;              /*  8  bumped by launchers while they wait for the slice: pending work */
    uint32_t active;            /* 12  the beat last seen by a process that launched since the one before */
    uint32_t bell;              /* 16  bumped, then futex-woken, after every drain */
    uint32_t reserved[11];      /* 20 */
};                              /* 64 */

/* report features: set by a library that keeps the rule; a scheduler reads them as hints about
 * this container only (zero in reports of libraries before it, whose reserved word it was).
 *   LB_REPORT_F_LIVE  every process holds a shared (read) open-file-description lock on byte
 *                     LB_SCHED_LIVE_BYTE(e) of the report while it has joined a slice on GPU e and
 *                     not reported that slice's drain. The kernel drops it when the process dies:
 *                     a slice whose joins outnumber its drains while no such lock is held has
 *                     nothing left running (its missing drains are of dead processes). */
#define LB_REPORT_F_LIVE 1u
#define LB_SCHED_LIVE_BYTE(e) ((long long)LB_SCHED_FILE_SIZE + (e))

struct lb_sched_report {
    uint64_t magic;             /*   0  LB_SCHED_REPORT_MAGIC */
    uint32_t version;           /*   8  LB_SCHED_VERSION */
    uint32_t features;          /*  12  LB_REPORT_F_* (was reserved: 0 from older libraries) */
    uint32_t reserved[12];      /*  16 */
    struct lb_sched_report_entry gpu[LB_SCHED_MAX_GPUS]; /* 64, indexed like the grant file's */
};                              /* 1088, in a LB_SCHED_FILE_SIZE file */

_Static_assert(sizeof(struct lb_sched_grant_entry) == 64, "grant entry size");
_Static_assert(offsetof(struct lb_sched_grant_entry, word) == 16, "grant word offset");
_Static_assert(offsetof(struct lb_sched_grant_entry, allowed_us) % 8 == 0, "allowed_us is one aligned word");
_Static_assert(offsetof(struct lb_sched_grant, gpu) == 64, "grant entries offset");
_Static_assert(sizeof(struct lb_sched_grant) == 1088, "grant size");
_Static_assert(sizeof(struct lb_sched_report_entry) == 64, "report entry size");
_Static_assert(offsetof(struct lb_sched_report, gpu) == 64, "report entries offset");
_Static_assert(offsetof(struct lb_sched_report, features) == 12, "report features offset");
_Static_assert(sizeof(struct lb_sched_report) == 1088, "report size");
_Static_assert(sizeof(struct lb_sched_report) <= LB_SCHED_FILE_SIZE, "report fits its file");

#endif /* LIMITBED_SCHED_H */
