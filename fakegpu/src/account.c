/*
 * Who queued the work the engines run (timeline.c), and what each one got: a process's queue per
 * unit, its work record and its container's. The records are the device's own count of completed
 * work, which the harness judges compute limits by (tools/gpuwork.c prints them); they never come
 * from what a limiter believes it launched.
 *
 * A process's record outlives it, so work done by a process that has exited still counts; the
 * table reuses the oldest dead process's record only when it is full (and counts that it did). A
 * container is what its processes name in FAKEGPU_CONTAINER, set by whoever starts the container
 * (the harness, a container's environment): the accounting of a test double, not an identity a
 * node could trust; its record collects the work of every process that named it, exited or not.
 * Every table that runs out counts what it could not record, so a reader can refuse the figures.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "state.h"

int fg_state_engine(fg_state *st, uint64_t timeslice_ns, const char *group, char *err, size_t errlen) {
    fg_copy(st->group, sizeof st->group, group ? group : "");
    if (fg_state_lock(st) != 0) {
        snprintf(err, errlen, "state file %s: cannot lock it", st->path);
        return -1;
    }
    uint64_t have = st->sh->timeslice_ns;
    if (!have)
        st->sh->timeslice_ns = timeslice_ns;
    fg_state_unlock(st);
    if (have && have != timeslice_ns) {
        snprintf(err, errlen,
                 "state file %s: its GPU runs %llu µs time slices, FAKEGPU_TIMESLICE_US asks for %llu: every process "
                 "of a GPU must use the same (or use another FAKEGPU_STATE_DIR)",
                 st->path, (unsigned long long)(have / 1000), (unsigned long long)(timeslice_ns / 1000));
        return -1;
    }
    return 0;
}

static int group_of(fg_shared *sh, const char *name) {
    if (!name[0])
        return -1;
    for (int i = 0; i < FG_MAX_GROUPS; i++) {
        if (!sh->group[i].name[0]) {
            memset(&sh->group[i], 0, sizeof sh->group[i]);
            fg_copy(sh->group[i].name, sizeof sh->group[i].name, name);
            return i;
        }
        if (strncmp(sh->group[i].name, name, FG_GROUP_LEN) == 0)
            return i;
    }
    sh->groups_missing++;
    return -1;
}

static uint64_t pid_namespace(void) {
    struct stat sb;
    return stat("/proc/self/ns/pid", &sb) == 0 ? (uint64_t)sb.st_ino : 0;
}

/* This process's record: the one it has, or a new one (a free entry, else the oldest dead
 * process's). -1 when every record belongs to a live process. */
static int acct_of(fg_state *st) {
    fg_shared *sh = st->sh;
    int i = st->acct - 1;
    if (i >= 0 && sh->acct[i].used && sh->acct[i].slot == st->slot && sh->acct[i].pid == (int32_t)getpid())
        return i;
    int pick = -1;
    for (i = 0; i < FG_MAX_ACCTS; i++) {
        const fg_acct *a = &sh->acct[i];
        if (!a->used) {
            pick = i;
            break;
        }
        if (a->slot < 0 && (pick < 0 || a->started < sh->acct[pick].started))
            pick = i;
    }
    if (pick < 0) {
        sh->accts_missing++;
        return -1;
    }
    fg_acct *a = &sh->acct[pick];
    if (a->used)
        sh->accts_recycled++;
    memset(a, 0, sizeof *a);
    a->used = 1, a->pid = (int32_t)getpid(), a->slot = st->slot;
    a->pidns = pid_namespace();
    a->started = st->clock ? st->clock() : fg_now_ns();
    a->group = group_of(sh, st->group);
    st->acct = pick + 1;
    return pick;
}

int fg_state_queue(fg_state *st, unsigned unit, int create) {
    if (unit >= FG_MAX_UNITS)
        return -1;
    fg_shared *sh = st->sh;
    int i = st->chan[unit] - 1;
    /* A queue of our slot is ours: a dead owner's queues went with its slot (timeline.c forgets them). */
    if (st->slot >= 0 && st->pid == getpid() && i >= 0 && sh->chan[i].in_use && sh->chan[i].slot == st->slot &&
        sh->chan[i].unit == unit)
        return i;
    if (!create)
        return -1;
    int s = fg_state_own_slot(st);
    if (s < 0)
        return -1;
    for (i = 0; i < FG_MAX_CHANNELS; i++) {
        fg_chan *c = &sh->chan[i];
        if (c->in_use)
            continue;
        c->in_use = 1, c->pid = (int32_t)getpid(), c->slot = s, c->unit = unit;
        c->power = st->power ? st->power : 100;
        c->head = c->count = 0, c->queued = 0;
        c->acct = acct_of(st);
        st->chan[unit] = (uint16_t)(i + 1);
        return i;
    }
    return -1;
}

void fg_state_records(fg_shared *sh, const fg_chan *c, unsigned unit, fg_work **proc, fg_work **group) {
    *proc = *group = NULL;
    if (c->acct < 0 || c->acct >= FG_MAX_ACCTS)
        return;
    fg_acct *a = &sh->acct[c->acct];
    *proc = &a->w[unit];
    if (a->group >= 0 && a->group < FG_MAX_GROUPS)
        *group = &sh->group[a->group].w[unit];
}
