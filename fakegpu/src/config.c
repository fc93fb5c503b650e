#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "state.h"

void fg_config_profile_path(char *buf, size_t len) {
    const char *p = getenv("FAKEGPU_PROFILE");
    if (!p || !*p) {
        fg_copy(buf, len, FG_DEFAULT_PROFILE);
        return;
    }
    if (strchr(p, '/')) {
        fg_copy(buf, len, p);
        return;
    }
    const char *dir = getenv("FAKEGPU_PROFILE_DIR");
    snprintf(buf, len, "%s/%s.profile", dir && *dir ? dir : FG_DEFAULT_PROFILE_DIR, p);
}

/* /run/fakegpu is the natural home (tmpfs, per boot) but needs root; /tmp/fakegpu works for all. */
static void state_dir(char *buf, size_t len) {
    const char *d = getenv("FAKEGPU_STATE_DIR");
    if (d && *d) {
        fg_copy(buf, len, d);
        return;
    }
    if ((mkdir("/run/fakegpu", 01777) == 0 || errno == EEXIST) && access("/run/fakegpu", W_OK | X_OK) == 0) {
        fg_copy(buf, len, "/run/fakegpu");
        return;
    }
    fg_copy(buf, len, "/tmp/fakegpu");
}

static int env_u64(const char *name, uint64_t *out, char *err, size_t errlen) {
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || *v < '0' || *v > '9') {
        snprintf(err, errlen, "%s=\"%s\": want a whole number", name, v);
        return -1;
    }
    *out = x;
    return 1;
}

_Static_assert(sizeof(((fg_config *)0)->container) == FG_GROUP_LEN, "FAKEGPU_CONTAINER fits a work record's name");

/* The time slice and the container name of the completed-work accounting (state.h). */
static int engine(fg_config *c, char *err, size_t errlen) {
    uint64_t us = c->prof.timeslice_us ? c->prof.timeslice_us : FG_TIMESLICE_DEFAULT_NS / 1000;
    if (env_u64("FAKEGPU_TIMESLICE_US", &us, err, errlen) < 0)
        return -1;
    if (us < 10 || us > 1000000) {
        snprintf(err, errlen, "FAKEGPU_TIMESLICE_US (or the profile's timeslice_us) %llu: want 10 to 1000000 (µs)",
                 (unsigned long long)us);
        return -1;
    }
    c->timeslice_ns = us * 1000;
    const char *name = getenv("FAKEGPU_CONTAINER");
    if (!name)
        return 0;
    size_t n = strlen(name), ok = n > 0 && n < sizeof c->container;
    for (size_t i = 0; ok && i < n; i++)
        ok = (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
             (name[i] >= '0' && name[i] <= '9') || strchr("._-", name[i]);
    if (!ok) {
        snprintf(err, errlen, "FAKEGPU_CONTAINER=\"%.80s\": want 1 to %zu of A-Z a-z 0-9 . _ -", name,
                 sizeof c->container - 1);
        return -1;
    }
    fg_copy(c->container, sizeof c->container, name);
    return 0;
}

/* The device's model beyond its memory: NVML's per-process samples, the power cap's speed-up and
 * the SM clock at full load; the profile's keys, then the environment over them. */
static int device_model(fg_config *c, char *err, size_t errlen) {
    const fg_profile *p = &c->prof;
    const char *smp = getenv("FAKEGPU_NVML_SAMPLES");
    if (!smp || !*smp)
        smp = p->nvml_samples;
    if (*smp && strcmp(smp, "exact") && strcmp(smp, "periodic")) {
        snprintf(err, errlen, "FAKEGPU_NVML_SAMPLES (or the profile's nvml_samples) \"%s\": want exact (the default) or periodic",
                 smp);
        return -1;
    }
    c->periodic_samples = !strcmp(smp, "periodic");
    c->power_boost = p->power_boost ? p->power_boost : 100;
    if (env_u64("FAKEGPU_POWER_BOOST", &c->power_boost, err, errlen) < 0)
        return -1;
    if (c->power_boost < 100 || c->power_boost > 400) {
        snprintf(err, errlen, "FAKEGPU_POWER_BOOST (or the profile's power_boost) %llu: want a percentage from 100 (no boost) to 400",
                 (unsigned long long)c->power_boost);
        return -1;
    }
    c->power_work = p->power_work_pct ? p->power_work_pct : 100;
    if (env_u64("FAKEGPU_POWER_WORK_PCT", &c->power_work, err, errlen) < 0)
        return -1;
    if (c->power_work < 1 || c->power_work > 100) {
        snprintf(err, errlen, "FAKEGPU_POWER_WORK_PCT (or the profile's power_work_pct) %llu: want the percentage of the clock's "
                 "gain that is work, 1 to 100", (unsigned long long)c->power_work);
        return -1;
    }
    c->kernel_power = 100;
    if (env_u64("FAKEGPU_KERNEL_POWER_PCT", &c->kernel_power, err, errlen) < 0)
        return -1;
    if (c->kernel_power < 1 || c->kernel_power > 100) {
        snprintf(err, errlen, "FAKEGPU_KERNEL_POWER_PCT %llu: want the power this process's kernels draw while they run, "
                 "in percent of a full-load kernel's, 1 to 100", (unsigned long long)c->kernel_power);
        return -1;
    }
    c->sm_clock_mhz = p->sm_clock_mhz ? p->sm_clock_mhz : 1500;
    if (c->sm_clock_mhz > 10000) {
        snprintf(err, errlen, "the profile's sm_clock_mhz %llu: want the SM clock at full load in MHz, up to 10000",
                 (unsigned long long)c->sm_clock_mhz);
        return -1;
    }
    return 0;
}

int fg_config_load(fg_config *c) {
    char path[512], err[1024];
    memset(c, 0, sizeof *c);
    fg_config_profile_path(path, sizeof path);
    if (fg_profile_load(path, &c->prof, err, sizeof err) != 0)
        goto bad;
    fg_profile *p = &c->prof;
    c->faults.lost_device = -1;
    /* The profile's fault keys first, then the environment overrides them key by key. */
    if (fg_fault_fail_alloc(&c->faults, p->fail_alloc, "fail_alloc", err, sizeof err) ||
        fg_fault_nvml_error(&c->faults, p->nvml_error, "nvml_error", err, sizeof err) ||
        fg_fault_lost_device(&c->faults, p->lost_device, p->ndev, "lost_device", err, sizeof err) ||
        fg_fault_fail_alloc(&c->faults, getenv("FAKEGPU_FAIL_ALLOC"), "FAKEGPU_FAIL_ALLOC", err, sizeof err) ||
        fg_fault_nvml_error(&c->faults, getenv("FAKEGPU_NVML_ERROR"), "FAKEGPU_NVML_ERROR", err, sizeof err) ||
        fg_fault_lost_device(&c->faults, getenv("FAKEGPU_LOST_DEVICE"), p->ndev, "FAKEGPU_LOST_DEVICE", err, sizeof err))
        goto bad;
    c->launch_ns = p->launch_ns, c->block_ns = p->block_ns;
    int r = env_u64("FAKEGPU_LAUNCH_NS", &c->launch_ns, err, sizeof err);
    if (r < 0)
        goto bad;
    if (r > 0)
        c->block_ns = 0; /* the variable sets the whole duration of a launch */
    uint64_t ms = 1000;
    if (env_u64("FAKEGPU_UTIL_WINDOW_MS", &ms, err, sizeof err) < 0)
        goto bad;
    c->util_window_ns = (ms ? ms : 1) * 1000000ULL;
    if (device_model(c, err, sizeof err) != 0)
        goto bad;
    const char *trace = getenv("FAKEGPU_NVML_TRACE");
    if (trace && *trace && strcmp(trace, "0") && strcmp(trace, "1")) {
        snprintf(err, sizeof err, "FAKEGPU_NVML_TRACE=\"%s\": want 1 (trace) or 0", trace);
        goto bad;
    }
    c->trace_export = trace && !strcmp(trace, "1");
    uint64_t stale_ms = 0;
    if (env_u64("FAKEGPU_NVML_STALE_MS", &stale_ms, err, sizeof err) < 0)
        goto bad;
    if (stale_ms > 600000) {
        snprintf(err, sizeof err, "FAKEGPU_NVML_STALE_MS=%llu: want 0 to 600000 (ms)", (unsigned long long)stale_ms);
        goto bad;
    }
    c->stale_ns = stale_ms * 1000000ULL;
    if (engine(c, err, sizeof err) != 0)
        goto bad;
    c->identity = fg_profile_identity(p);
    char dir[400];
    state_dir(dir, sizeof dir);
    snprintf(c->state_path, sizeof c->state_path, "%s/%.60s-%016llx.state", dir, p->name,
             (unsigned long long)c->identity);
    return 0;
bad:
    fg_log("%s", err);
    return -1;
}
