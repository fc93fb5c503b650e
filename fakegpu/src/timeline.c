/*
 * The engines' timeline: how the kernels processes queue run on a unit (a GPU or a MIG instance).
 *
 * A real GPU time-slices between the contexts of different processes. Each context's work is a
 * queue (the driver's channel group); the engine runs one queue at a time for a time slice, round
 * robin over the queues that have work: a queue that runs dry gives the engine up at once, a queue
 * alone keeps it, and with compute preemption (Pascal and later) a kernel still running when its
 * slice ends is stopped mid-way and resumed at the queue's next turn. The open kernel module gives
 * every channel group 1024 µs on Volta and later (FG_TIMESLICE_DEFAULT_NS); FAKEGPU_TIMESLICE_US
 * sets another length for a whole GPU.
 *
 * fakegpu runs the same scheduler over kernels of known length. Nothing executes, so the timeline
 * is simulated lazily: whoever takes the state lock first brings every unit up to now (the only
 * moments anything can change are launches, which take the lock, and the clock). A unit keeps the
 * queue that holds the engine and when its slice ends; queues are taken in channel order after it.
 * Kernels are preempted at the end of a slice, as on the real GPU: a kernel longer than a slice
 * (a 1 s kernel) shares the engine with its neighbours instead of holding it for its whole length,
 * so exclusive use of a GPU, if a scheduler wants it, comes from holding launches back and waiting
 * for the queue to drain, as it must on real hardware. A context switch costs nothing here.
 *
 * Each step of the simulation is credited to the unit, the process's record and its container's
 * (account.c) and appended to the unit's ring of busy intervals, which NVML's utilisation reads.
 */
#include "state.h"

static uint64_t slice_of(const fg_shared *sh) { return sh->timeslice_ns ? sh->timeslice_ns : FG_TIMESLICE_DEFAULT_NS; }

static int has_work(const fg_shared *sh, int i, unsigned unit) {
    const fg_chan *c = &sh->chan[i];
    return c->in_use && c->unit == unit && c->count > 0;
}

/* The next queue of the unit with work after `after` (-1: from the first), round robin in
 * channel order; `after` itself comes last. -1 when none has work. */
static int next_queue(const fg_shared *sh, unsigned unit, int after) {
    for (int n = 1; n <= FG_MAX_CHANNELS; n++) {
        int i = (after + n + FG_MAX_CHANNELS) % FG_MAX_CHANNELS;
        if (has_work(sh, i, unit))
            return i;
    }
    return -1;
}

/* A busy interval of one process. Back-to-back intervals of one process merge. A full ring
 * overwrites its oldest interval unless that one still counts for NVML's windows; then the new
 * interval is folded into the newest by its duration only (stretching the newest to the new end
 * would count the idle gap between them as busy): the device total stays right, only the
 * placement inside the window and the attribution to a process blur. */
#define FG_RING_KEEP_NS (2 * 1000000000ULL) /* the periodic samples look back two 1 s windows */

static void ring_add(fg_unit *u, int32_t pid, int32_t slot, uint32_t power, uint64_t start, uint64_t end) {
    fg_busy *last = u->count ? &u->ring[(u->head + FG_BUSY_RING - 1) % FG_BUSY_RING] : NULL;
    uint16_t slot1 = slot >= 0 && slot < FG_MAX_SLOTS ? (uint16_t)(slot + 1) : 0;
    uint16_t pw = power && power <= 100 ? (uint16_t)power : 100;
    if (last && last->pid == pid && last->slot1 == slot1 && last->power == pw && last->end == start) {
        last->end = end;
        return;
    }
    if (u->count == FG_BUSY_RING) {
        if (u->ring[u->head].end + FG_RING_KEEP_NS > start) {
            last->end += end - start;
            return;
        }
    } else {
        u->count++;
    }
    u->ring[u->head] = (fg_busy){start, end, pid, slot1, pw};
    u->head = (u->head + 1) % FG_BUSY_RING;
}

/* The nominal ns of work in the first `ran` ns of a kernel's run. */
static uint64_t part(const fg_kernel *k, uint64_t ran) {
    if (ran >= k->run)
        return k->nominal;
    return (uint64_t)((unsigned __int128)ran * k->nominal / k->run);
}

static void credit(fg_work *w, uint64_t busy, uint64_t work, int completed) {
    if (!w)
        return;
    w->busy_ns += busy, w->work_ns += work, w->kernels += (uint64_t)completed;
}

/* Runs `step` ns of the queue's head kernel from t on; pops it when it completes. */
static void run(fg_shared *sh, unsigned unit, fg_chan *c, uint64_t t, uint64_t step) {
    fg_unit *u = &sh->unit[unit];
    fg_kernel *k = &c->k[c->head];
    uint64_t before = part(k, k->run - k->left);
    k->left -= step;
    c->queued -= step;
    uint64_t work = k->run ? part(k, k->run - k->left) - before : k->nominal;
    int done = k->left == 0;
    fg_work *w[3] = {&u->total, NULL, NULL};
    fg_state_records(sh, c, unit, &w[1], &w[2]);
    for (int i = 0; i < 3; i++)
        credit(w[i], step, work, done);
    if (step)
        ring_add(u, c->pid, c->slot, c->power, t, t + step);
    if (done) {
        c->head = (c->head + 1) % FG_CHAN_DEPTH;
        if (--c->count == 0)
            u->active--;
    }
}

void fg_state_advance(fg_shared *sh, unsigned unit, uint64_t to) {
    fg_unit *u = &sh->unit[unit];
    uint64_t t = u->sim_at, slice = slice_of(sh);
    if (to <= t)
        return;
    while (t < to && u->active) {
        int ci = u->cur;
        if (ci < 0 || !has_work(sh, ci, unit)) { /* the engine's queue ran dry (or none had it) */
            ci = next_queue(sh, unit, ci);
            if (ci < 0)
                break;
            u->cur = ci, u->slice_end = t + slice;
        } else if (t >= u->slice_end) { /* its slice is over: the next queue with work, or itself again */
            ci = next_queue(sh, unit, ci);
            u->cur = ci, u->slice_end = t + slice;
        }
        fg_chan *c = &sh->chan[ci];
        uint64_t step = c->k[c->head].left;
        if (step > u->slice_end - t)
            step = u->slice_end - t;
        if (step > to - t)
            step = to - t;
        run(sh, unit, c, t, step);
        t += step;
    }
    u->sim_at = to;
}

/* Takes the queue off the engine (its process is gone): its work is dropped unrun. */
static void drop_queue(fg_shared *sh, int ci) {
    fg_chan *c = &sh->chan[ci];
    fg_unit *u = &sh->unit[c->unit];
    if (c->count)
        u->active--;
    if (u->cur == ci)
        u->cur = -1;
    c->in_use = 0, c->count = 0, c->queued = 0;
}

/* After a lock holder died mid-way: every queue's count and queued ns, and every unit's active
 * count and running queue, made consistent with the kernels the queues hold. */
static void repair(fg_shared *sh) {
    for (unsigned u = 0; u < FG_MAX_UNITS; u++) {
        sh->unit[u].active = 0;
        if (sh->unit[u].cur < -1 || sh->unit[u].cur >= FG_MAX_CHANNELS)
            sh->unit[u].cur = -1;
    }
    for (int i = 0; i < FG_MAX_CHANNELS; i++) {
        fg_chan *c = &sh->chan[i];
        if (!c->in_use)
            continue;
        if (c->unit >= FG_MAX_UNITS || c->count > FG_CHAN_DEPTH || c->head >= FG_CHAN_DEPTH) {
            c->in_use = 0, c->count = 0, c->queued = 0; /* nothing in it can be trusted: dropped */
            continue;
        }
        uint64_t q = 0;
        for (uint32_t k = 0; k < c->count; k++) {
            uint64_t left = c->k[(c->head + k) % FG_CHAN_DEPTH].left;
            q = q > UINT64_MAX - left ? UINT64_MAX : q + left;
        }
        c->queued = q;
        if (c->count)
            sh->unit[c->unit].active++;
    }
}

int64_t fg_state_submit(fg_state *st, unsigned unit, uint64_t run_ns, uint64_t nominal) {
    int ci = fg_state_queue(st, unit, 1);
    if (ci < 0)
        return -1;
    /* The kernel arrives now: not when an idle engine was last brought up, nor before this
     * process's queue and records were made (the first submit of a process takes milliseconds
     * there, which its first kernels would otherwise have run in, in the past). */
    fg_state_advance(st->sh, unit, fg_state_clock(st));
    fg_chan *c = &st->sh->chan[ci];
    if (c->count == FG_CHAN_DEPTH) {
        uint64_t head = c->k[c->head].left;
        return head > INT64_MAX ? INT64_MAX : head ? (int64_t)head : 1;
    }
    if (c->queued > FG_QUEUE_NS) {
        uint64_t over = c->queued - FG_QUEUE_NS;
        return over > INT64_MAX ? INT64_MAX : (int64_t)over;
    }
    c->k[(c->head + c->count) % FG_CHAN_DEPTH] = (fg_kernel){run_ns, run_ns, nominal};
    c->queued = c->queued > UINT64_MAX - run_ns ? UINT64_MAX : c->queued + run_ns;
    if (c->count++ == 0)
        st->sh->unit[unit].active++;
    return 0;
}

/* Between two turns of this queue every other queue with work gets a whole slice or runs dry;
 * this queue needs ceil(left / slice) more turns (fewer if it holds the engine now), and a queue
 * that holds the engine now first finishes its slice. So this queue cannot have run before now +
 * its own work + what each other queue must run before its last turn. */
uint64_t fg_state_drain_at(fg_state *st, unsigned unit) {
    int ci = fg_state_queue(st, unit, 0);
    if (ci < 0 || st->sh->chan[ci].count == 0)
        return 0;
    const fg_shared *sh = st->sh;
    const fg_unit *u = &sh->unit[unit];
    uint64_t slice = slice_of(sh), left = sh->chan[ci].queued, t = u->sim_at, gaps;
    uint64_t rest = u->slice_end > t ? u->slice_end - t : 0; /* of the running queue's slice */
    if (u->cur == ci && rest) {
        uint64_t now = rest < left ? rest : left;
        gaps = (left - now + slice - 1) / slice;
    } else {
        gaps = (left + slice - 1) / slice - 1;
    }
    uint64_t others = 0, cap = gaps > UINT64_MAX / slice - 1 ? UINT64_MAX - slice : gaps * slice;
    for (int i = 0; i < FG_MAX_CHANNELS; i++) {
        if (i == ci || !has_work(sh, i, unit))
            continue;
        uint64_t most = cap + (i == u->cur ? rest : 0);
        uint64_t q = sh->chan[i].queued < most ? sh->chan[i].queued : most;
        others = others > UINT64_MAX - q ? UINT64_MAX : others + q;
    }
    uint64_t wait = others > UINT64_MAX - left ? UINT64_MAX : others + left;
    return wait > UINT64_MAX - t ? UINT64_MAX : t + wait;
}

/* A dead slot's queues are dropped, its work records marked exited. */
static void forget(fg_shared *sh, int slot) {
    for (int i = 0; i < FG_MAX_CHANNELS; i++)
        if (sh->chan[i].in_use && sh->chan[i].slot == slot)
            drop_queue(sh, i);
    for (int i = 0; i < FG_MAX_ACCTS; i++)
        if (sh->acct[i].used && sh->acct[i].slot == slot)
            sh->acct[i].slot = -1;
}

uint64_t fg_state_now(fg_state *st, unsigned unit) {
    fg_unit *u = &st->sh->unit[unit];
    if (!u->active) /* an idle engine is not brought up to now by the lock */
        fg_state_advance(st->sh, unit, fg_state_clock(st));
    return u->sim_at;
}

static const fg_state_engine_ops engine_ops = {
    .repair = repair, .slot_gone = forget, .advance = fg_state_advance};
static void __attribute__((constructor)) engine_register(void) { fg_state_set_engine(&engine_ops); }
