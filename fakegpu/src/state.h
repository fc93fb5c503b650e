/*
 * The device state every process on the "host" shares, like the memory and the engines of a
 * real GPU: a file under FAKEGPU_STATE_DIR, one per profile identity, mmap'd by every process
 * that loads fakegpu (containers share it through a bind mount).
 *
 * Consistency: one process-shared robust mutex guards the whole struct. A process that dies
 * holding it hands it over as EOWNERDEAD; the next locker marks it consistent, the dead
 * process's slot is reclaimed by the liveness scan below (its numbers are never trusted again)
 * and the engines' queue bookkeeping, which any locker updates, is rebuilt (timeline.c, through fg_state_engine_ops).
 *
 * Liveness: every process that uses memory owns a slot and holds a write lock on byte
 * [FG_LOCK_OFFSET + slot] of the same file. The locks are open-file-description locks
 * (F_OFD_SETLK): the kernel drops them when the process dies, whatever its PID namespace, and
 * unlike classic POSIX record locks they are not dropped when the *other* library of the same
 * process (libnvidia-ml next to libcuda) closes its own descriptor of the file. A slot marked in
 * use whose byte nobody locks belongs to a dead process and is reclaimed on the next lock.
 * fork: the child shares the parent's open file description, so it reopens the file and takes a
 * slot of its own (fg_state_after_fork); O_CLOEXEC keeps exec'd programs from inheriting it.
 *
 * The descriptor is the program's to close (closefrom, a double close, dup2 over it), and its
 * number may then name a file of the program's. So:
 * - the lock lives on the open file description, and the mapping keeps that description open
 *   (the kernel drops OFD locks with the description's last reference, and a MAP_SHARED mapping
 *   is one): the program closing the descriptor does not end our liveness. A forked child
 *   remaps the file through a description of its own, so that it neither keeps its parent's
 *   liveness after the parent dies nor loses its own with its descriptor;
 * - before every use the descriptor is checked to still be ours (the same file, and the file
 *   position we parked our description at, which no other description of it has); if not, the file is opened again and
 *   the old number is left alone. fakegpu never locks, reads or closes a descriptor it did not
 *   open (it cannot tell one a thread of the program swaps in between the check and the use).
 *
 * PIDs as the reader sees them (the NVML process list): a real driver records each process by
 * its host PID, whatever namespace it runs in. The kernel offers the same translation for classic
 * POSIX record locks: F_GETLK reports the holder's PID in the *asking* process's PID namespace (0
 * when the holder is not visible there). So a slot owner also takes a classic write lock on byte
 * [slot] of a side file, <state>.pids, and a reader asks F_GETLK for it: a node agent in the host's
 * namespace (or a kind node's) gets the PID it can map and signal, a process in a container gets
 * its own container's PIDs. Classic locks are dropped when their process closes *any* descriptor
 * of the file, so the side file is opened once per library and never closed (fg_state_detach
 * leaves it open; O_CLOEXEC ends it at exec, with the process's slot). A slot whose classic lock
 * is not visible (the reader's own, or not taken) reports the PID its owner recorded. The program
 * may still close the side file's descriptor (closefrom): its lock goes with it and readers get the
 * recorded PID (the fake's limit: a driver keeps host PIDs itself); the descriptor is checked to
 * be the side file before each use and opened again when it is not, never another file locked.
 *
 * Engines: each unit (a GPU or a MIG instance) runs the kernels that processes queue on it,
 * time-sliced between processes as a real GPU does (timeline.c). The timeline is simulated lazily:
 * every fg_state_lock brings every unit up to "now" first, so whoever holds the lock sees the
 * engines as they are at that moment. What ran is counted per unit, per process and per container
 * (account.c): the completed work the harness judges limits by (tools/gpuwork.c prints it).
 */
#ifndef FG_STATE_H
#define FG_STATE_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "fg.h"

#define FG_STATE_MAGIC 0x31545347504b4146ULL /* "FAKGPST1" */
#define FG_STATE_VERSION 4
#define FG_MAX_SLOTS 128
#define FG_MAX_SHARED 256 /* allocations held by more than one process at once */
#define FG_BUSY_RING 4096
#define FG_MAX_CHANNELS 256 /* work queues: one per process and unit it launches on */
#define FG_CHAN_DEPTH 1024  /* kernels one queue holds, like a real GPU's launch queue */
#define FG_QUEUE_NS 1000000000ULL /* and at most this much work (ns) queued behind the running kernel */
#define FG_MAX_ACCTS 512    /* per-process work records, kept after the process exits */
#define FG_MAX_GROUPS 256   /* per-container work records */
#define FG_GROUP_LEN 64     /* a container's name (FAKEGPU_CONTAINER), NUL included */
/* The time slice of the open kernel module for Volta and later GPUs: 128 << 3 µs per channel group
 * (FAKEGPU_TIMESLICE_US changes it). */
#define FG_TIMESLICE_DEFAULT_NS 1024000ULL

typedef struct fg_busy {
    uint64_t start, end; /* CLOCK_MONOTONIC ns */
    int32_t pid;         /* the owner as it sees itself */
    uint16_t slot1;      /* the owner's slot + 1 (0: not recorded): NVML names the owner by the PID its reader sees */
    uint16_t power;      /* the power its kernels drew, percent of a full-load kernel's (FAKEGPU_KERNEL_POWER_PCT) */
} fg_busy;

/* What an engine ran: kernels completed, the nominal ns of work done (a kernel's share counted as
 * it runs, so a window of a long kernel gets its part), and the ns the engine spent on it (less
 * than the work under FAKEGPU_POWER_BOOST). Only ever grows. */
typedef struct fg_work {
    uint64_t kernels, work_ns, busy_ns;
} fg_work;

typedef struct fg_unit {
    uint64_t sim_at;             /* the timeline is simulated up to here (CLOCK_MONOTONIC ns) */
    uint64_t slice_end;          /* when the running queue's time slice ends */
    int32_t cur;                 /* the queue (channel) holding the engine, -1 none */
    uint32_t active;             /* queues with work */
    uint32_t head, count;
    fg_work total;
    fg_busy ring[FG_BUSY_RING];  /* recent busy intervals, for utilisation */
} fg_unit;

/* A queued kernel: GPU ns still to run, GPU ns it runs in all, nominal ns of work it is. */
typedef struct fg_kernel {
    uint64_t left, run, nominal;
} fg_kernel;

/* A process's queue of work on one unit (the real driver's channel group of its context). */
typedef struct fg_chan {
    uint32_t in_use;
    int32_t pid;                 /* the owner as it sees itself (busy intervals, NVML) */
    int32_t slot;                /* the owner's slot: the queue and its work die with the process */
    uint32_t unit;
    int32_t acct;                /* the owner's work record, -1 none */
    uint32_t head, count;
    uint32_t power;              /* its kernels' power, percent of a full-load kernel's (fg_state.power) */
    uint64_t queued;             /* GPU ns left in the queue */
    fg_kernel k[FG_CHAN_DEPTH];
} fg_chan;

/* A process's work record. It outlives the process (slot -1) until the table needs its room. */
typedef struct fg_acct {
    uint32_t used;
    int32_t pid;                 /* as the process sees itself */
    int32_t slot;                /* -1 once the process is gone */
    int32_t group;               /* its container's record, -1 none */
    uint64_t pidns;              /* inode of its PID namespace: PIDs repeat across containers */
    uint64_t started;            /* CLOCK_MONOTONIC ns of its first launch */
    fg_work w[FG_MAX_UNITS];
} fg_acct;

/* A container's work record: every process that named it in FAKEGPU_CONTAINER. */
typedef struct fg_group {
    char name[FG_GROUP_LEN];
    fg_work w[FG_MAX_UNITS];
} fg_group;

typedef struct fg_slot {
    int32_t pid;                 /* as the owner sees itself */
    uint32_t in_use;
    uint64_t used[FG_MAX_UNITS]; /* bytes of allocations */
    uint64_t ctx[FG_MAX_UNITS];  /* bytes charged for contexts */
} fg_slot;

/* An allocation that other processes hold too: a cuMemAlloc'd range exported with
 * cuIpcGetMemHandle, or a VMM allocation exported as a file descriptor. Its bytes are charged
 * once, here, not to any slot, for as long as one holder lives (its exporter until it frees it, an
 * importer until it closes or releases it); a holder that dies is dropped by the liveness scan. */
typedef struct fg_shared_alloc {
    uint64_t id;                        /* 0: free entry */
    uint64_t nonce;                     /* in the handle, so a guessed handle names nothing */
    uint64_t bytes;
    uint32_t unit;
    uint32_t kind;                      /* FG_SHARE_IPC, FG_SHARE_VMM */
    uint64_t holders[FG_MAX_SLOTS / 64]; /* bit s: slot s holds a reference */
} fg_shared_alloc;

#define FG_SHARE_IPC 1u
#define FG_SHARE_VMM 2u

typedef struct fg_shared {
    uint64_t magic;
    uint32_t version;
    uint32_t size;
    uint64_t identity;
    uint32_t nunits;
    uint32_t pad;
    pthread_mutex_t mutex;
    uint64_t timeslice_ns;       /* 0 until the first CUDA process sets it (FG_TIMESLICE_DEFAULT_NS) */
    uint64_t accts_recycled;     /* dead processes' records reused for new ones */
    uint64_t accts_missing;      /* processes that got no record: every record was a live process's */
    uint64_t groups_missing;     /* processes whose container got no record: the table was full */
    fg_slot slot[FG_MAX_SLOTS];
    fg_unit unit[FG_MAX_UNITS];
    uint64_t next_share_id;
    fg_shared_alloc share[FG_MAX_SHARED];
    fg_chan chan[FG_MAX_CHANNELS];
    fg_acct acct[FG_MAX_ACCTS];
    fg_group group[FG_MAX_GROUPS];
} fg_shared;

#define FG_LOCK_OFFSET ((off_t)sizeof(fg_shared))

typedef struct fg_state {
    fg_shared *sh;
    int fd;
    int pids_fd;   /* <path>.pids: classic locks for PID translation; opened once, never closed */
    int pids_open; /* pids_fd is open (the struct starts zeroed: fd 0 is not "open") */
    dev_t pids_dev; /* the side file pids_fd was opened on, checked before each use */
    ino_t pids_ino;
    int slot;  /* this process's slot, -1 until it needs one */
    pid_t pid; /* the process this attachment (descriptor, mapping, slot) belongs to */
    dev_t dev; /* the state file: a descriptor that no longer names it is not ours */
    ino_t ino;
    char path[600];
    uint16_t chan[FG_MAX_UNITS]; /* this process's queue per unit, index + 1 (0: none yet) */
    int acct;                    /* its work record, index + 1 (0: none yet) */
    char group[FG_GROUP_LEN];    /* its container (FAKEGPU_CONTAINER), "" none */
    uint64_t (*clock)(void);     /* the engines' clock: fg_now_ns unless a test scripts one */
    uint32_t power;              /* its kernels' power, percent of a full-load kernel's (0: 100) */
} fg_state;

/* A state nobody attached yet: no descriptor (0 is the program's standard input, not ours). */
#define FG_STATE_DETACHED {.sh = NULL, .fd = -1, .slot = -1}

int fg_state_attach(fg_state *st, const char *path, uint64_t identity, unsigned nunits, char *err, size_t errlen);
void fg_state_detach(fg_state *st);

/* The engine settings a CUDA process brings (after attach): its time slice, which must be the one
 * the GPU already runs if another process set it, and its container. 0, or -1 with err. */
int fg_state_engine(fg_state *st, uint64_t timeslice_ns, const char *group, char *err, size_t errlen);

/* Locks the shared mutex, reclaims dead processes' slots (their queued work goes with them) and
 * brings every engine with work up to now (an idle one has nothing to add). 0 or -1. */
int fg_state_lock(fg_state *st);
void fg_state_unlock(fg_state *st);

/* The rest is called with the lock held. */
int fg_state_own_slot(fg_state *st); /* takes a slot on first use; -1 when all are taken */
uint64_t fg_state_unit_used(const fg_state *st, unsigned unit);
/* 0: charged; -1: would exceed limit; -2: no free slot. */
int fg_state_charge(fg_state *st, unsigned unit, uint64_t bytes, uint64_t limit, int is_ctx);
void fg_state_release(fg_state *st, unsigned unit, uint64_t bytes, int is_ctx);
/* Shared allocations (lock held). share: bytes already charged to this process move to a new
 * entry that it holds; returns the entry's index or -1 (table full). hold: this process takes a
 * reference on entry id (checked against its nonce); returns the index or -1. drop: it lets go;
 * the entry and its bytes go with the last holder. */
int fg_state_share(fg_state *st, unsigned unit, uint64_t bytes, uint32_t kind);
int fg_state_share_hold(fg_state *st, uint64_t id, uint64_t nonce);
void fg_state_share_drop(fg_state *st, uint64_t id);
/* Queues a kernel on this process's queue of the unit, now: run ns of engine time doing nominal ns
 * of work. 0: queued; > 0: the queue is full (FG_CHAN_DEPTH kernels or more than FG_QUEUE_NS of
 * work), try again no sooner than that many ns later; -1: no slot, queue or record left. */
int64_t fg_state_submit(fg_state *st, unsigned unit, uint64_t run, uint64_t nominal);
/* 0 when this process has nothing queued on the unit; else the earliest time (ns) its queue can
 * have run, whatever the other queues do (a lower bound: sleep until then and ask again). */
uint64_t fg_state_drain_at(fg_state *st, unsigned unit);
/* The engines' clock (st->clock, else CLOCK_MONOTONIC), and the unit's simulated now: its timeline
 * brought up to the clock (lock held). */
uint64_t fg_state_clock(const fg_state *st);
uint64_t fg_state_now(fg_state *st, unsigned unit);
/* Brings the unit's timeline up to `to` (timeline.c; fg_state_lock does it for every busy unit). */
void fg_state_advance(fg_shared *sh, unsigned unit, uint64_t to);

/* Between state.c, timeline.c and account.c, with the lock held. */
/* This process's queue on the unit, made (with its slot and work record) when create is set;
 * -1 when it has none or none is left. */
int fg_state_queue(fg_state *st, unsigned unit, int create);
/* The process's and the container's records a queue's work is credited to (NULL: none). */
void fg_state_records(fg_shared *sh, const fg_chan *c, unsigned unit, fg_work **proc, fg_work **group);
/* ns of [now - window, now] during which the unit ran work, of one pid or of all (pid 0). */
uint64_t fg_state_busy_ns(const fg_state *st, unsigned unit, int32_t pid, uint64_t now, uint64_t window);
/* FAKEGPU_POWER_BOOST's model: how fast (percent of nominal) work submitted now runs, given the
 * unit's load over the last FG_POWER_WINDOW_NS: min(boost, 100 / load), the load weighted by the
 * power its kernels drew (FAKEGPU_KERNEL_POWER_PCT of the processes that ran them). */
#define FG_POWER_WINDOW_NS 100000000ULL /* 100 ms: how far back a power controller averages */
uint64_t fg_state_speed(const fg_state *st, unsigned unit, uint64_t now, uint64_t boost);
/* The same as a percentage. */
unsigned fg_state_util(const fg_state *st, unsigned unit, int32_t pid, uint64_t now, uint64_t window);

/* The PID of slot's owner in the caller's PID namespace (see "PIDs as the reader sees them"). */
int32_t fg_state_slot_pid(fg_state *st, int slot);

/* What the engines (timeline.c) do inside the state's lock, registered by them when the library
 * is loaded (a constructor), so that the lock's file never calls them by name: rebuild the queues'
 * bookkeeping after a holder died inside the lock, drop a reaped slot's queues, and bring a busy
 * unit's timeline up to now. fg_state_attach fails while none is registered. */
typedef struct fg_state_engine_ops {
    void (*repair)(fg_shared *sh);
    void (*slot_gone)(fg_shared *sh, int slot);
    void (*advance)(fg_shared *sh, unsigned unit, uint64_t to);
} fg_state_engine_ops;
void fg_state_set_engine(const fg_state_engine_ops *ops);

/* Not under the lock: in a forked child, before anything else. Detaches (fails closed) when the
 * file cannot be opened again. */
void fg_state_after_fork(fg_state *st);

#endif
