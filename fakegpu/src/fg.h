/*
 * Shared definitions of fakegpu's two libraries: the export macro, limits and small helpers.
 *
 * Both libraries are built with -fvisibility=hidden; only what FG_EXPORT marks is part of the
 * driver ABI, so helper functions shared between the objects never leak into a user's process.
 */
#ifndef FG_H
#define FG_H

#include <stddef.h>
#include <stdint.h>

#define FG_EXPORT __attribute__((visibility("default")))

#define FG_MAX_DEVICES 16 /* physical GPUs in one profile */
#define FG_MAX_MIG 7      /* MIG instances per GPU (an A100/H100 has at most 7) */
#define FG_MAX_UNITS 64   /* accounting units: GPUs without MIG plus every MIG instance */
#define FG_MIB (1024ULL * 1024ULL)

/* One line on stderr, prefixed "fakegpu: ", written with write(2) so it is safe anywhere. */
void fg_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* CLOCK_MONOTONIC in ns: shared by every process of the host, PID namespaces included. */
uint64_t fg_now_ns(void);

/* snprintf into a fixed buffer that never overflows; returns the buffer. */
char *fg_copy(char *dst, size_t len, const char *src);

#endif
