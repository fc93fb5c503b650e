/*
 * gpuwork: fakegpu's own record of the work its engines ran (src/account.c), per GPU, per process
 * and per container: the judge of compute limits, which counts what completed on the device, not
 * what a limiter launched or what NVML sampled. docs/fakegpu.md ("Completed work") has the format;
 * harness/gpuwork is its one reader.
 *
 *   gpuwork            one snapshot: one JSON line
 *   gpuwork --serve    one snapshot for every line read on stdin, until EOF (a sampler's pipe)
 *
 * It attaches to the GPU the environment selects (FAKEGPU_PROFILE, FAKEGPU_STATE_DIR) like any
 * process of the host. A snapshot is copied under the state lock with the engines brought up to
 * now, and printed after the lock is released (a slow reader must never stall the GPU's users).
 * Exit status: 0; 1 when the profile or the state cannot be loaded; 2 on a usage error.
 */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "state.h"

typedef struct snapshot {
    uint64_t now, timeslice, recycled, unrecorded, groups_unrecorded;
    unsigned nunits, naccts, ngroups;
    fg_work unit[FG_MAX_UNITS];
    fg_acct acct[FG_MAX_ACCTS];
    fg_group group[FG_MAX_GROUPS];
} snapshot;

static snapshot snap;
static int unit_gpu[FG_MAX_UNITS], unit_mig[FG_MAX_UNITS];

static int take(fg_state *st) {
    if (fg_state_lock(st) != 0)
        return -1;
    fg_shared *sh = st->sh;
    snap.nunits = sh->nunits < FG_MAX_UNITS ? sh->nunits : FG_MAX_UNITS;
    snap.now = fg_state_clock(st); /* every engine brought up to one time: the snapshot's */
    for (unsigned u = 0; u < snap.nunits; u++)
        fg_state_advance(sh, u, snap.now);
    snap.timeslice = sh->timeslice_ns ? sh->timeslice_ns : FG_TIMESLICE_DEFAULT_NS;
    snap.recycled = sh->accts_recycled, snap.unrecorded = sh->accts_missing, snap.groups_unrecorded = sh->groups_missing;
    for (unsigned u = 0; u < snap.nunits; u++)
        snap.unit[u] = sh->unit[u].total;
    snap.naccts = snap.ngroups = 0;
    for (int i = 0; i < FG_MAX_ACCTS; i++)
        if (sh->acct[i].used)
            snap.acct[snap.naccts++] = sh->acct[i];
    for (int i = 0; i < FG_MAX_GROUPS; i++)
        if (sh->group[i].name[0])
            snap.group[snap.ngroups++] = sh->group[i];
    fg_state_unlock(st);
    return 0;
}

static void jstr(const char *s, size_t max) {
    putchar('"');
    for (size_t i = 0; i < max && s[i]; i++)
        if (s[i] == '"' || s[i] == '\\')
            printf("\\%c", s[i]);
        else if ((unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f)
            putchar(s[i]);
    putchar('"');
}

static void work(const fg_work *w) {
    printf("\"kernels\":%llu,\"work_ns\":%llu,\"busy_ns\":%llu", (unsigned long long)w->kernels,
           (unsigned long long)w->work_ns, (unsigned long long)w->busy_ns);
}

/* The units a record ran work on. */
static void units(const fg_work *w) {
    int first = 1;
    printf("\"units\":[");
    for (unsigned u = 0; u < snap.nunits; u++) {
        if (!w[u].kernels && !w[u].work_ns && !w[u].busy_ns)
            continue;
        printf("%s{\"unit\":%u,", first ? "" : ",", u);
        work(&w[u]);
        printf("}");
        first = 0;
    }
    printf("]");
}

static void print(void) {
    printf("{\"now_ns\":%llu,\"timeslice_ns\":%llu,\"units\":[", (unsigned long long)snap.now,
           (unsigned long long)snap.timeslice);
    for (unsigned u = 0; u < snap.nunits; u++) {
        printf("%s{\"unit\":%u,\"gpu\":%d,\"mig\":%d,", u ? "," : "", u, unit_gpu[u], unit_mig[u]);
        work(&snap.unit[u]);
        printf("}");
    }
    printf("],\"processes\":[");
    for (unsigned i = 0; i < snap.naccts; i++) {
        const fg_acct *a = &snap.acct[i];
        printf("%s{\"pid\":%d,\"pidns\":%llu,\"started_ns\":%llu,\"alive\":%s,\"container\":", i ? "," : "", a->pid,
               (unsigned long long)a->pidns, (unsigned long long)a->started, a->slot >= 0 ? "true" : "false");
        /* the container table only grows from its start, so a record's index is the same here */
        jstr(a->group >= 0 && (unsigned)a->group < snap.ngroups ? snap.group[a->group].name : "", FG_GROUP_LEN);
        printf(",");
        units(a->w);
        printf("}");
    }
    printf("],\"containers\":[");
    for (unsigned i = 0; i < snap.ngroups; i++) {
        printf("%s{\"name\":", i ? "," : "");
        jstr(snap.group[i].name, FG_GROUP_LEN);
        printf(",");
        units(snap.group[i].w);
        printf("}");
    }
    printf("],\"processes_recycled\":%llu,\"processes_unrecorded\":%llu,\"containers_unrecorded\":%llu}\n",
           (unsigned long long)snap.recycled, (unsigned long long)snap.unrecorded,
           (unsigned long long)snap.groups_unrecorded);
    fflush(stdout);
}

int main(int argc, char **argv) {
    int serve = argc == 2 && !strcmp(argv[1], "--serve");
    if (argc > 2 || (argc == 2 && !serve)) {
        fprintf(stderr, "usage: gpuwork [--serve]\n");
        return 2;
    }
    static fg_config cfg;
    static fg_state st;
    char err[1024];
    if (fg_config_load(&cfg) != 0)
        return 1;
    if (fg_state_attach(&st, cfg.state_path, cfg.identity, cfg.prof.nunits, err, sizeof err) != 0) {
        fprintf(stderr, "gpuwork: %s\n", err);
        return 1;
    }
    for (unsigned d = 0; d < cfg.prof.ndev; d++) {
        const fg_device *dv = &cfg.prof.dev[d];
        if (dv->unit < FG_MAX_UNITS)
            unit_gpu[dv->unit] = (int)d, unit_mig[dv->unit] = -1;
        for (unsigned m = 0; m < dv->nmig; m++)
            if (dv->mig[m].unit < FG_MAX_UNITS)
                unit_gpu[dv->mig[m].unit] = (int)d, unit_mig[dv->mig[m].unit] = (int)m;
    }
    char line[256];
    while (!serve || fgets(line, sizeof line, stdin)) {
        if (take(&st) != 0) {
            fprintf(stderr, "gpuwork: cannot lock the state file %s\n", st.path);
            return 1;
        }
        print();
        if (!serve)
            break;
    }
    fg_state_detach(&st);
    return 0;
}
