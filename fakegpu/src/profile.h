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

#define FG_NAME_LEN 96
#define FG_UUID_LEN 48
#define FG_PCI_LEN 32

typedef struct fg_mig {
    char profile[32];     /* "1g.5gb" */
    char uuid[FG_UUID_LEN];
    uint64_t memory_mib;
    unsigned gpu_instance_id;
    unsigned compute_instance_id;
    unsigned sm_count;
    unsigned copy_engines, decoders, encoders, jpegs, ofas; /* shared engines, as nvidia-smi lists them */
    unsigned slices;      /* GPU instance slices: the <n> of "<n>g.…" (derived) */
    unsigned unit;        /* accounting unit in the shared state (derived) */
} fg_mig;

typedef struct fg_device {
    char name[FG_NAME_LEN];
    char uuid[FG_UUID_LEN];
    uint64_t memory_mib;
    char pci_bus_id[FG_PCI_LEN]; /* "00000000:00:05.0" */
    unsigned pci_device_id;      /* 0x25B610DE */
    unsigned minor;
    unsigned architecture;       /* NVML_DEVICE_ARCH_* */
    unsigned cc_major, cc_minor;
    unsigned sm_count;
    uint64_t bar1_mib;           /* BAR1 aperture (default 256) */
    unsigned mig_enabled;
    unsigned nmig;
    fg_mig mig[FG_MAX_MIG];
    unsigned unit;               /* accounting unit (derived) */
} fg_device;

typedef struct fg_profile {
    char path[512];
    char name[64];               /* file name without ".profile" */
    char driver_version[32];
    unsigned cuda_version;       /* 12040 */
    char nvml_version[32];       /* default "12." + driver_version */
    uint64_t context_mib;        /* primary context cost */
    uint64_t launch_ns;          /* simulated duration of every launch ... */
    uint64_t block_ns;           /* ... plus this much per thread block */
    char fail_alloc[24];         /* fault keys, same syntax as the FAKEGPU_* variables */
    char nvml_error[96];
    char lost_device[24];
    uint64_t timeslice_us;       /* the GPU's time slice between processes (0: 1024) */
    uint64_t power_boost;        /* percent: kernels' speed-up on a lightly loaded GPU (0: 100, none) */
    char nvml_samples[16];       /* exact | periodic ("": exact) */
    uint64_t sm_clock_mhz;       /* the SM clock at full load (0: 1500) */
    unsigned ndev;
    unsigned nunits;             /* derived: GPUs + MIG instances */
    fg_device dev[FG_MAX_DEVICES];
} fg_profile;

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
