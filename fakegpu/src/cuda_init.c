/* cuInit and the driver version: the profile's devices enumerated into fg_cu (cuda_process.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_internal.h"

static void add_ordinal(const fg_profile *p, unsigned d, int m) {
    const fg_device *dv = &p->dev[d];
    fg_cudev *c = &fg_cu.dev[fg_cu.ndev++];
    memset(c, 0, sizeof *c);
    c->phys = d, c->mig = m, c->cc_major = dv->cc_major, c->cc_minor = dv->cc_minor;
    if (m < 0) {
        c->unit = dv->unit, c->total = dv->memory_mib * FG_MIB, c->sm_count = dv->sm_count;
        fg_copy(c->name, sizeof c->name, dv->name);
        fg_uuid_bytes(dv->uuid, c->uuid);
        return;
    }
    const fg_mig *mg = &dv->mig[m];
    c->unit = mg->unit, c->total = mg->memory_mib * FG_MIB;
    c->sm_count = mg->sm_count ? mg->sm_count : dv->sm_count / 7;
    char name[sizeof c->name]; /* both strings live in fg_cu too: keep snprintf's arguments apart */
    snprintf(name, sizeof name, "%s MIG %s", dv->name, mg->profile);
    fg_copy(c->name, sizeof c->name, name);
    fg_uuid_bytes(mg->uuid, c->uuid);
}

static int find_uuid(const fg_profile *p, const char *tok, unsigned *d, int *m) {
    for (unsigned i = 0; i < p->ndev; i++) {
        if (strcmp(p->dev[i].uuid, tok) == 0 && !p->dev[i].mig_enabled)
            return *d = i, *m = -1, 0;
        for (unsigned j = 0; j < p->dev[i].nmig; j++)
            if (strcmp(p->dev[i].mig[j].uuid, tok) == 0)
                return *d = i, *m = (int)j, 0;
    }
    return -1;
}

static unsigned sms(const fg_profile *p, unsigned d, int m) {
    return m < 0 ? p->dev[d].sm_count : p->dev[d].mig[m].sm_count ? p->dev[d].mig[m].sm_count : p->dev[d].sm_count / 7;
}

static int faster(const fg_profile *p, unsigned ad, int am, unsigned bd, int bm) {
    unsigned a = p->dev[ad].cc_major * 10 + p->dev[ad].cc_minor, b = p->dev[bd].cc_major * 10 + p->dev[bd].cc_minor;
    return a != b ? a > b : sms(p, ad, am) > sms(p, bd, bm);
}

/* CUDA enumerates whole GPUs, and the MIG instances of GPUs in MIG mode. CUDA_VISIBLE_DEVICES
 * filters and orders them like the real driver: indexes or UUIDs, stopping at the first entry
 * that names nothing. */
static void enumerate(const fg_profile *p) {
    fg_cu.ndev = 0;
    unsigned all_d[FG_MAX_UNITS];
    int all_m[FG_MAX_UNITS];
    unsigned n = 0;
    for (unsigned d = 0; d < p->ndev; d++) {
        if (!p->dev[d].mig_enabled)
            all_d[n] = d, all_m[n++] = -1;
        for (unsigned m = 0; p->dev[d].mig_enabled && m < p->dev[d].nmig; m++)
            all_d[n] = d, all_m[n++] = (int)m;
    }
    /* CUDA_DEVICE_ORDER: FASTEST_FIRST (the default) puts the most capable devices first
     * (compute capability, then SM count; ties keep PCI order; profiles with MIG instances are
     * not reordered); PCI_BUS_ID keeps the PCI order,
     * which is NVML's. CUDA_VISIBLE_DEVICES indexes count in this order. */
    const char *order = getenv("CUDA_DEVICE_ORDER");
    int mig = 0; /* MIG instances keep the profile's order (the fake has no speed for them) */
    for (unsigned i = 0; i < n; i++)
        mig |= all_m[i] >= 0;
    if (!mig && (!order || strcmp(order, "PCI_BUS_ID") != 0)) {
        for (unsigned i = 1; i < n; i++) /* stable insertion sort, n <= FG_MAX_UNITS */
            for (unsigned j = i; j > 0 && faster(p, all_d[j], all_m[j], all_d[j - 1], all_m[j - 1]); j--) {
                unsigned td = all_d[j];
                int tm = all_m[j];
                all_d[j] = all_d[j - 1], all_m[j] = all_m[j - 1];
                all_d[j - 1] = td, all_m[j - 1] = tm;
            }
    }
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (!vis) {
        for (unsigned i = 0; i < n; i++)
            add_ordinal(p, all_d[i], all_m[i]);
        return;
    }
    char buf[1024];
    fg_copy(buf, sizeof buf, vis);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok && fg_cu.ndev < FG_MAX_UNITS; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        unsigned d;
        int m;
        char *end;
        long idx = strtol(tok, &end, 10);
        if (*tok >= '0' && *tok <= '9' && *end == 0 && idx < (long)n)
            add_ordinal(p, all_d[idx], all_m[idx]);
        else if (find_uuid(p, tok, &d, &m) == 0)
            add_ordinal(p, d, m);
        else
            break;
    }
}

FG_EXPORT CUresult cuInit(unsigned int Flags) {
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    CUresult rc = fg_cu.init_rc;
    if (!fg_cu.initialized && rc == CUDA_SUCCESS) {
        char err[1024];
        if (fg_config_load(&fg_cu.cfg) != 0) {
            rc = CUDA_ERROR_NO_DEVICE;
        } else if (fg_state_attach(&fg_cu.st, fg_cu.cfg.state_path, fg_cu.cfg.identity, fg_cu.cfg.prof.nunits, err,
                                   sizeof err) != 0) {
            fg_log("%s", err);
            rc = CUDA_ERROR_NO_DEVICE;
        } else if (fg_state_engine(&fg_cu.st, fg_cu.cfg.timeslice_ns, fg_cu.cfg.container, err, sizeof err) != 0) {
            fg_log("%s", err);
            fg_state_detach(&fg_cu.st);
            rc = CUDA_ERROR_NO_DEVICE;
        } else {
            enumerate(&fg_cu.cfg.prof);
            fg_cu.st.power = (uint32_t)fg_cu.cfg.kernel_power;
            fg_cu.initialized = 1;
        }
        fg_cu.init_rc = rc;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return rc;
}

/* Like the real one, cuDriverGetVersion answers before cuInit: it needs only the profile. */
static fg_config early_cfg;
static int early_ok;
static pthread_once_t early_once = PTHREAD_ONCE_INIT;
static void early_load(void) { early_ok = fg_config_load(&early_cfg) == 0; }

FG_EXPORT CUresult cuDriverGetVersion(int *driverVersion) {
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    if (fg_cu_ready() == CUDA_SUCCESS) {
        *driverVersion = (int)fg_cu.cfg.prof.cuda_version;
        return CUDA_SUCCESS;
    }
    pthread_once(&early_once, early_load);
    if (!early_ok)
        return CUDA_ERROR_NO_DEVICE;
    *driverVersion = (int)early_cfg.prof.cuda_version;
    return CUDA_SUCCESS;
}
