/*
 * The binary layout of the shared usage region (the pod's usage.cache).
 *
 * This header is the single source of truth for the layout: libvgpu.so and the layout tests
 * include it, and docs/usage-cache.md describes the same offsets for the Go decoder (plugin/region,
 * used by the monitor and regiondump).
 * Every field has a fixed width and a fixed offset (checked with _Static_assert below); integers
 * are in the byte order of the machine that writes them (little-endian on x86-64 and arm64; the
 * magic reads differently on a big-endian reader, which is how such a reader detects it).
 *
 * Changing an offset, a size or a meaning requires a new LB_REGION_VERSION.
 */
#ifndef LIMITBED_REGION_H
#define LIMITBED_REGION_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* "LBUSAGE\0" read as a little-endian 64-bit integer. */
#define LB_REGION_MAGIC 0x004547415355424CULL
#define LB_REGION_VERSION 2u
#define LB_REGION_MAX_DEVICES 16
#define LB_REGION_MAX_SLOTS 1024

/* mem_limit[] value of a device without a memory limit (not virtualised). A finite value is a
 * limit in bytes; 0 means "refuse every allocation" (a limit that could not be parsed). */
#define LB_MEM_UNLIMITED UINT64_MAX

/* slot.state */
#define LB_SLOT_FREE 0u
#define LB_SLOT_ACTIVE 1u

/* header.policy: GPU_CORE_UTILIZATION_POLICY */
#define LB_POLICY_DEFAULT 0u
#define LB_POLICY_FORCE 1u
#define LB_POLICY_DISABLE 2u

/* header.flags */
#define LB_FLAG_OVERSUBSCRIBE 1u
/* Set once a process had to account outside the slots (all taken): its bytes are in used_total
 * but in no slot, so used_total is never rebuilt from the slots after that (over-count, never
 * under-count). */
#define LB_FLAG_OVERFLOW_SEEN 2u

/* One process. Liveness is NOT stored here: the owner holds a POSIX (fcntl) write lock on the byte
 * at lock_offset + 1 + index for as long as it lives, so F_GETLK answers "is it alive" from any
 * PID namespace (the kernel drops the lock when the process dies, however it dies). */
struct lb_region_slot {
    _Atomic uint32_t state;        /*   0  LB_SLOT_FREE / LB_SLOT_ACTIVE */
    int32_t pid;                   /*   4  pid in the process's own PID namespace */
    int32_t hostpid;               /*   8  pid in the initial PID namespace, 0 = unknown */
    uint32_t reserved0;            /*  12 */
    uint64_t claimed_at;           /*  16  CLOCK_REALTIME seconds when the slot was claimed */
    uint64_t reserved1[3];         /*  24 */
    _Atomic uint64_t used[LB_REGION_MAX_DEVICES]; /* 48  bytes charged, by GPU (NVML index) */
    uint64_t reserved2[2];         /* 176 */
};                                 /* 192 */

struct lb_region_header {
    _Atomic uint64_t magic;        /*   0  LB_REGION_MAGIC, written last when the region is created */
    uint32_t version;              /*   8  LB_REGION_VERSION */
    uint32_t header_size;          /*  12  offset of slot 0 (1024) */
    uint64_t file_size;            /*  16  total size of the file */
    uint32_t max_devices;          /*  24  LB_REGION_MAX_DEVICES */
    uint32_t max_slots;            /*  28  LB_REGION_MAX_SLOTS */
    uint32_t slot_size;            /*  32  sizeof(struct lb_region_slot) */
    uint32_t lock_offset;          /*  36  companion lock range: +0 creation lock, +1+i slot i */
    int32_t creator_pid;           /*  40  pid (own namespace) of the process that stamped the limits */
    uint32_t limits_format;        /*  44  HAMI_LIMITS_FORMAT of the stamping process (0: none) */
    _Atomic uint32_t slot_hwm;     /*  48  1 + highest slot index ever claimed */
    uint32_t policy;               /*  52  LB_POLICY_* */
    int32_t priority;              /*  56  CUDA_TASK_PRIORITY */
    _Atomic uint32_t flags;        /*  60  LB_FLAG_* */
    uint64_t mem_limit[LB_REGION_MAX_DEVICES]; /* 64  bytes, LB_MEM_UNLIMITED, or 0 = refuse */
    uint32_t sm_limit[LB_REGION_MAX_DEVICES];  /* 192 percent 1..100 (100 = no compute limit) */
    union {                        /* 256  process-shared robust mutex (opaque to readers) */
        pthread_mutex_t m;
        unsigned char bytes[64];
    } mutex;
    /* 320  per GPU (its NVML index, never a process's CUDA ordinal: devmap.c; mem_limit and
     *      used[] too): bytes reserved by every process of the region. The allocation path
     *      checks the limit against this one counter (O(1), whatever the number of processes);
     *      it equals the sum of the slots' used[] except for the bytes of a process that died
     *      between its two updates (an over-count, repaired when the last live slot is gone). */
    _Atomic uint64_t used_total[LB_REGION_MAX_DEVICES];
    _Atomic uint32_t util_switch;  /* 448  upstream's utilization_switch: 1 = with policy "default" the
                                    *      compute limit applies (stamped 1); a monitor may write 0 */
    uint32_t reserved0;            /* 452 */
    _Atomic uint32_t recent_kernel;/* 456  set to 1 by a launch of any process when it reads 0; the node
                                    *      monitor swaps it back to 0 each period: "launched recently" */
    uint32_t reserved1;            /* 460 */
    uint8_t dev_uuid[LB_REGION_MAX_DEVICES][16]; /* 464 NVML index -> GPU UUID, stamped from NVML
                                    *      (devmap.c); all zero = not known yet */
    _Atomic uint64_t calib_at;     /* 720  CLOCK_REALTIME seconds when a process of the container last ran its
                                    *      full-load calibration (limiter.c); 0 = never */
    _Atomic uint32_t work_factor[LB_REGION_MAX_DEVICES]; /* 728 per CUDA ordinal, in thousandths: how much
                                    *      more work a share of the GPU's time buys at the container's
                                    *      throttled clocks than at full load (1000..1500; 0 = not measured) */
    uint64_t reserved[29];         /* 792 */
};                                 /* 1024 */

#define LB_REGION_HEADER_SIZE 1024u
#define LB_REGION_SLOT_SIZE 192u
#define LB_REGION_LOCK_OFFSET (LB_REGION_HEADER_SIZE + LB_REGION_MAX_SLOTS * LB_REGION_SLOT_SIZE) /* 197632 */
#define LB_REGION_LOCK_BYTES (1u + LB_REGION_MAX_SLOTS)
/* The file is padded to whole pages; the lock bytes are part of it but hold no data. */
#define LB_REGION_FILE_SIZE (((LB_REGION_LOCK_OFFSET + LB_REGION_LOCK_BYTES) + 4095u) & ~4095u) /* 200704 */

_Static_assert(sizeof(struct lb_region_slot) == LB_REGION_SLOT_SIZE, "slot size");
_Static_assert(offsetof(struct lb_region_slot, used) == 48, "slot.used offset");
_Static_assert(sizeof(struct lb_region_header) == LB_REGION_HEADER_SIZE, "header size");
_Static_assert(offsetof(struct lb_region_header, mem_limit) == 64, "mem_limit offset");
_Static_assert(offsetof(struct lb_region_header, sm_limit) == 192, "sm_limit offset");
_Static_assert(offsetof(struct lb_region_header, mutex) == 256, "mutex offset");
_Static_assert(offsetof(struct lb_region_header, used_total) == 320, "used_total offset");
_Static_assert(offsetof(struct lb_region_header, util_switch) == 448, "util_switch offset");
_Static_assert(offsetof(struct lb_region_header, recent_kernel) == 456, "recent_kernel offset");
_Static_assert(offsetof(struct lb_region_header, dev_uuid) == 464, "dev_uuid offset");
_Static_assert(offsetof(struct lb_region_header, calib_at) == 720, "calib_at offset");
_Static_assert(offsetof(struct lb_region_header, work_factor) == 728, "work_factor offset");
_Static_assert(sizeof(pthread_mutex_t) <= 64, "pthread_mutex_t fits its field");
_Static_assert(LB_REGION_FILE_SIZE == 200704u, "file size");

static inline struct lb_region_slot *lb_region_slots(struct lb_region_header *h)
{
    return (struct lb_region_slot *)((unsigned char *)h + LB_REGION_HEADER_SIZE);
}

#endif /* LIMITBED_REGION_H */
