/*
 * fgtruth: what every process holds on every device of the fake host, read from the shared
 * device state as the driver keeps it (the truth a limiter is judged against).
 *
 *   fgtruth            one JSON object on stdout, from the environment fakegpu reads
 *                      (FAKEGPU_PROFILE, FAKEGPU_PROFILE_DIR, FAKEGPU_STATE_DIR)
 *   fgtruth --csv      the lines `nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory
 *                      --format=csv,noheader,nounits` prints: "PID, GPU-UUID, MiB" for each process
 *                      on each GPU it holds memory on (a MIG instance's under its GPU; a shared
 *                      allocation counted once, to its first holder; MiB rounded up), so a script
 *                      that judges a real GPU by nvidia-smi runs unchanged on the fake one
 *
 * The state is read under its lock, after the liveness scan every fakegpu call runs, so a process
 * that died is already gone from it. Output:
 *   {"units":[{"unit":U,"gpu":G,"mig":M,"uuid":"GPU-…","total":B,"used":B}, …],
 *    "procs":[{"slot":S,"pid":P,"used":[B per unit],"ctx":[B per unit]}, …],
 *    "shared":[{"id":I,"unit":U,"bytes":B,"kind":"ipc"|"vmm","holders":[pid, …]}, …]}
 * "used" of a unit is everything charged to it (allocations, contexts, shared allocations once);
 * a process's "used" is what it allocated alone, "ctx" its contexts. A shared allocation is held by
 * every listed process and counted once. The harness decodes this in one place
 * (harness/memjudge, truth.go). Exit 1 when there is no state file yet (nothing ran), 2 on error.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "state.h"

static void list(const uint64_t *v, unsigned n)
{
    putchar('[');
    for (unsigned i = 0; i < n; i++)
        printf("%s%llu", i ? "," : "", (unsigned long long)v[i]);
    putchar(']');
}

/* --csv: per process and GPU, what it holds (its allocations and contexts, the shared allocations
 * it is the first holder of). */
static void csv(const fg_state *st, const fg_profile *p)
{
    for (int i = 0; i < FG_MAX_SLOTS; i++) {
        const fg_slot *s = &st->sh->slot[i];
        if (!s->in_use)
            continue;
        for (unsigned d = 0; d < p->ndev; d++) {
            const fg_device *dv = &p->dev[d];
            uint64_t b = 0;
            for (int m = dv->mig_enabled ? 0 : -1; m < (int)(dv->mig_enabled ? dv->nmig : 0); m++) {
                unsigned u = m < 0 ? dv->unit : dv->mig[m].unit;
                b += s->used[u] + s->ctx[u];
                for (int j = 0; j < FG_MAX_SHARED; j++) {
                    const fg_shared_alloc *a = &st->sh->share[j];
                    if (!a->id || a->unit != u)
                        continue;
                    int firstholder = -1;
                    for (int h = 0; h < FG_MAX_SLOTS && firstholder < 0; h++)
                        if ((a->holders[h / 64] >> (h % 64)) & 1)
                            firstholder = h;
                    if (firstholder == i)
                        b += a->bytes;
                }
            }
            if (b)
                printf("%d, %s, %llu\n", s->pid, dv->uuid, (unsigned long long)((b + FG_MIB - 1) / FG_MIB));
        }
    }
}

int main(int argc, char **argv)
{
    int as_csv = argc == 2 && strcmp(argv[1], "--csv") == 0;
    if (argc != 1 && !as_csv) {
        fprintf(stderr, "usage: fgtruth [--csv] (the FAKEGPU_* environment selects the host)\n");
        return 2;
    }
    fg_config cfg;
    if (fg_config_load(&cfg) != 0)
        return 2;
    if (access(cfg.state_path, F_OK) != 0) {
        fprintf(stderr, "fgtruth: %s: no device state yet (no process used this fake host)\n", cfg.state_path);
        return 1;
    }
    fg_state st;
    char err[700];
    if (fg_state_attach(&st, cfg.state_path, cfg.identity, cfg.prof.nunits, err, sizeof err) != 0) {
        fprintf(stderr, "fgtruth: %s\n", err);
        return 2;
    }
    if (fg_state_lock(&st) != 0) {
        fprintf(stderr, "fgtruth: %s: cannot lock the device state\n", cfg.state_path);
        return 2;
    }
    const fg_profile *p = &cfg.prof;
    if (as_csv) {
        csv(&st, p);
        fg_state_unlock(&st);
        fg_state_detach(&st);
        return 0;
    }
    unsigned n = p->nunits;
    printf("{\"units\":[");
    int first = 1;
    for (unsigned d = 0; d < p->ndev; d++) {
        const fg_device *dv = &p->dev[d];
        for (int m = dv->mig_enabled ? 0 : -1; m < (int)(dv->mig_enabled ? dv->nmig : 0); m++) {
            unsigned u = m < 0 ? dv->unit : dv->mig[m].unit;
            printf("%s{\"unit\":%u,\"gpu\":%u,\"mig\":%d,\"uuid\":\"%s\",\"total\":%llu,\"used\":%llu}", first ? "" : ",",
                   u, d, m, m < 0 ? dv->uuid : dv->mig[m].uuid,
                   (unsigned long long)((m < 0 ? dv->memory_mib : dv->mig[m].memory_mib) * FG_MIB),
                   (unsigned long long)fg_state_unit_used(&st, u));
            first = 0;
        }
    }
    printf("],\"procs\":[");
    first = 1;
    for (int i = 0; i < FG_MAX_SLOTS; i++) {
        const fg_slot *s = &st.sh->slot[i];
        if (!s->in_use)
            continue;
        printf("%s{\"slot\":%d,\"pid\":%d,\"used\":", first ? "" : ",", i, s->pid);
        list(s->used, n);
        printf(",\"ctx\":");
        list(s->ctx, n);
        putchar('}');
        first = 0;
    }
    printf("],\"shared\":[");
    first = 1;
    for (int j = 0; j < FG_MAX_SHARED; j++) {
        const fg_shared_alloc *a = &st.sh->share[j];
        if (!a->id)
            continue;
        printf("%s{\"id\":%llu,\"unit\":%u,\"bytes\":%llu,\"kind\":\"%s\",\"holders\":[", first ? "" : ",",
               (unsigned long long)a->id, a->unit, (unsigned long long)a->bytes, a->kind == FG_SHARE_IPC ? "ipc" : "vmm");
        int f2 = 1;
        for (int s = 0; s < FG_MAX_SLOTS; s++)
            if ((a->holders[s / 64] >> (s % 64)) & 1) {
                printf("%s%d", f2 ? "" : ",", st.sh->slot[s].pid);
                f2 = 0;
            }
        printf("]}");
        first = 0;
    }
    printf("]}\n");
    fg_state_unlock(&st);
    fg_state_detach(&st);
    return 0;
}
