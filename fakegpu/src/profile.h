/*
 * Device profiles: what the fake GPUs look like. docs/fakegpu.md documents every key.
 *
 * The format is flat and line-oriented so that a small strict parser can read it and so that
 * the Go harness can write one with fmt.Fprintf:
 *
 *     # comment (a '#' anywhere starts one)
 *     driver_version = 550.90.07      global keys first
 *     device = 0                      opens device 0; the device keys that follow belong to it
 *     name = NVIDIA A16-16Q
 *     mig = 0                         opens MIG instance 0 of the current device
 *     mig_profile = 1g.5gb
 */
#ifndef FG_PROFILE_H
#define FG_PROFILE_H

#include <stdint.h>

#include "fg.h"

#define FG_NAME_LEN 96 /* the "name" key's size in keys.def */

/* A field per key of a scope, from the one table of keys (keys.def beside the Go reader): the
 * type's C form, in the struct of the key's scope only. */
#define FG_FIELD_STR(f, n) char f[n];
#define FG_FIELD_GPU_UUID(f, n) char f[n];
#define FG_FIELD_MIG_UUID(f, n) char f[n];
#define FG_FIELD_PCI(f, n) char f[n];
#define FG_FIELD_U64(f, n) uint64_t f;
#define FG_FIELD_UINT(f, n) unsigned f;
#define FG_FIELD_ARCH(f, n) unsigned f; /* NVML_DEVICE_ARCH_* */
#define FG_FIELD_ONOFF(f, n) unsigned f;
#define FG_FIELD_CC(f, n) unsigned f##_major, f##_minor;
#define FG_IN_GLOBAL_GLOBAL(x) x
#define FG_IN_GLOBAL_DEVICE(x)
#define FG_IN_GLOBAL_MIG(x)
#define FG_IN_DEVICE_GLOBAL(x)
#define FG_IN_DEVICE_DEVICE(x) x
#define FG_IN_DEVICE_MIG(x)
#define FG_IN_MIG_GLOBAL(x)
#define FG_IN_MIG_DEVICE(x)
#define FG_IN_MIG_MIG(x) x
#define FG_KEY_FIELD(in, scope, field, type, size) FG_IN_##in##_##scope(FG_FIELD_##type(field, size))

typedef struct fg_mig {
#define FG_KEY(scope, name, field, type, size, required, dflt) FG_KEY_FIELD(MIG, scope, field, type, size)
#include "../profile/keys.def"
    unsigned slices;      /* GPU instance slices: the <n> of "<n>g.…" (derived) */
    unsigned unit;        /* accounting unit in the shared state (derived) */
} fg_mig;

typedef struct fg_device {
#define FG_KEY(scope, name, field, type, size, required, dflt) FG_KEY_FIELD(DEVICE, scope, field, type, size)
#include "../profile/keys.def"
    unsigned nmig;
    fg_mig mig[FG_MAX_MIG];
    unsigned unit;               /* accounting unit (derived) */
} fg_device;

typedef struct fg_profile {
    char path[512];
    char name[64];               /* file name without ".profile" */
#define FG_KEY(scope, name, field, type, size, required, dflt) FG_KEY_FIELD(GLOBAL, scope, field, type, size)
#include "../profile/keys.def"
    unsigned ndev;
    unsigned nunits;             /* derived: GPUs + MIG instances */
    fg_device dev[FG_MAX_DEVICES];
} fg_profile;

_Static_assert(sizeof(((fg_device *)0)->name) == FG_NAME_LEN, "keys.def: a device name's size is FG_NAME_LEN");

/* Parses text (the contents of path) into *out. Returns 0, or -1 with a message in err that
 * names the file, the line and the fix. */
int fg_profile_parse(const char *path, const char *text, fg_profile *out, char *err, size_t errlen);

/* Reads and parses a file. */
int fg_profile_load(const char *path, fg_profile *out, char *err, size_t errlen);

/* Parses "GPU-…" / "MIG-…" into the 16 bytes cuDeviceGetUuid reports. */
int fg_uuid_bytes(const char *uuid, unsigned char out[16]);

/* A stable 64-bit identity of the devices (names the state file). */
uint64_t fg_profile_identity(const fg_profile *p);

#endif
