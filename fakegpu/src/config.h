/*
 * Everything a library needs before it can answer: the profile, the faults and where the shared
 * device state lives. Both libraries load it the same way, from the same environment (the
 * engine's variables override the profile's keys timeslice_us, power_boost and nvml_samples):
 *   FAKEGPU_PROFILE      a profile name (looked up in FAKEGPU_PROFILE_DIR) or a path (has a '/')
 *   FAKEGPU_PROFILE_DIR  where names are looked up (default FG_DEFAULT_PROFILE_DIR)
 *   FAKEGPU_STATE_DIR    where the shared state file lives (default /run/fakegpu, else /tmp/fakegpu)
 *   FAKEGPU_LAUNCH_NS    simulated duration of every kernel launch (overrides the profile)
 *   FAKEGPU_UTIL_WINDOW_MS  NVML utilisation sampling window (default 1000)
 *   FAKEGPU_NVML_SAMPLES exact (default) | periodic: per-process samples as an H200 gives them
 *   FAKEGPU_POWER_BOOST  percent: how much faster kernels run on a lightly loaded device than on a
 *                        fully loaded one (a power-capped GPU's clocks; default 100 = the same)
 *   FAKEGPU_KERNEL_POWER_PCT  percent: the power this process's kernels draw while they run, of a
 *                        full-load kernel's (default 100; a loop of small kernels synchronised one
 *                        by one keeps the GPU busy below its power cap)
 *   FAKEGPU_NVML_TRACE   1: one stderr line per call through nvidia-smi's internal export table
 *   FAKEGPU_TIMESLICE_US the time slice between processes' queues on a GPU (default 1024)
 *   FAKEGPU_CONTAINER    the container a process's completed work is also counted for
 *   FAKEGPU_NVML_STALE_MS how long a process that ended stays in the NVML process list (default 0)
 * plus the fault variables of fault.h.
 */
#ifndef FG_CONFIG_H
#define FG_CONFIG_H

#include "fault.h"
#include "profile.h"

#ifndef FG_DEFAULT_PROFILE_DIR
#define FG_DEFAULT_PROFILE_DIR "/etc/fakegpu/profiles"
#endif
#define FG_DEFAULT_PROFILE "/etc/fakegpu/profile"

typedef struct fg_config {
    fg_profile prof;
    fg_faults faults;
    uint64_t launch_ns, block_ns;
    uint64_t util_window_ns;
    int periodic_samples; /* FAKEGPU_NVML_SAMPLES=periodic: per-process samples as an H200 gives them */
    uint64_t power_boost;  /* FAKEGPU_POWER_BOOST, percent (100 = off) */
    uint64_t power_work;   /* FAKEGPU_POWER_WORK_PCT: the part of the clock's gain that is work, percent */
    uint64_t kernel_power; /* FAKEGPU_KERNEL_POWER_PCT: this process's kernels' power, percent of a full-load kernel's */
    int trace_export;      /* FAKEGPU_NVML_TRACE=1 */
    uint64_t timeslice_ns; /* FAKEGPU_TIMESLICE_US */
    uint64_t sm_clock_mhz; /* the profile's sm_clock_mhz: the SM clock at full load */
    char container[64];    /* FAKEGPU_CONTAINER, "" none */
    uint64_t stale_ns;     /* FAKEGPU_NVML_STALE_MS: an ended process stays in the NVML process list */
    char state_path[600];
    uint64_t identity;
} fg_config;

/* Loads the configuration. On error prints one line on stderr and returns -1. */
int fg_config_load(fg_config *c);

/* The profile path FAKEGPU_PROFILE selects. */
void fg_config_profile_path(char *buf, size_t len);

#endif
