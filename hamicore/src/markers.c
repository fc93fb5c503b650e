/* The queued-work bound (markers.h). Batches are sized so one takes about a quarter of the bound
 * (at least LB_MK_BATCH_NS) of GPU time, a launch's time measured as the time between two
 * markers' completions over the launches between them (when the GPU was idle before a batch,
 * from its record instead), smoothed: the queue refills in steps of a quarter of the bound. A kernel longer than the bound gets one
 * batch of one launch in flight: the next waits for it (the GPU idles only for a launch's
 * latency between two such kernels).
 *
 * A completion's figure can be far too low: a launcher the CPU did not run between its launches
 * and the marker's record finds its kernels already done (a loaded 2-core node measured a 2 ms
 * kernel at 2 µs), and batches sized to that queued 0.75 s of a shape mix in a 30 ms slice. So a
 * figure too low is corrected before it floods the queue, both ways failing closed: a batch grows
 * at most twice per completion (not per batch, which a launcher outruns), and a marker seen still
 * pending lifts the cost to what it has provably taken so far (lb_mk_pending). */
#include "markers.h"

#include <string.h>

void lb_mk_reset(struct lb_markers *m)
{
    memset(m, 0, sizeof *m);
    m->batch = 1;
}

int64_t lb_mk_bound(uint32_t budget_us, int64_t elapsed_ns)
{
    if (!budget_us)
        return LB_MK_QUEUE_OPEN_NS;
    int64_t b = (int64_t)budget_us * 1000 - elapsed_ns;
    if (b > LB_MK_QUEUE_MAX_NS)
        return LB_MK_QUEUE_MAX_NS;
    return b < LB_MK_QUEUE_MIN_NS ? LB_MK_QUEUE_MIN_NS : b;
}

int lb_mk_room(struct lb_markers *m, int64_t bound)
{
    if (m->per_launch > 0) {
        double ns = bound / 4 > LB_MK_BATCH_NS ? (double)(bound / 4) : (double)LB_MK_BATCH_NS;
        /* up at most twice per completion: the first launches measured may be a mix's shortest */
        double b = ns / m->per_launch, most = m->grown ? m->batch : 2.0 * m->batch;
        b = b > most ? most : b;
        uint32_t nb = b < 1 ? 1 : b > LB_MK_BATCH_MAX ? LB_MK_BATCH_MAX : (uint32_t)b;
        m->grown |= nb > m->batch;
        m->batch = nb;
    }
    if (m->count == 0)
        return 1;
    if (m->count >= LB_MK_RING)
        return 0;
    /* Unmeasured: one batch in flight at a time, so the first completions size the batches. */
    if (m->per_launch <= 0)
        return m->count < 1;
    double queued = 0;
    for (unsigned i = 0; i < m->count; i++)
        queued += m->per_launch * m->ring[(m->head + i) % LB_MK_RING].n;
    return queued + m->per_launch * m->batch <= (double)bound;
}

/* The oldest marker's GPU ns per launch if it completes at now: its launches were all made by its
 * record and run after the marker before it was seen complete, so from the later of the two. */
static double per_launch_by(const struct lb_markers *m, int64_t now)
{
    const struct lb_marker *k = &m->ring[m->head];
    int64_t from = k->at > m->last_done ? k->at : m->last_done;
    return now > from && k->n ? (double)(now - from) / k->n : 0;
}

void lb_mk_done(struct lb_markers *m, int64_t now)
{
    if (m->count == 0)
        return;
    struct lb_marker *k = &m->ring[m->head];
    double per = per_launch_by(m, now);
    if (per > 0)
        m->per_launch = m->per_launch > 0 ? m->per_launch + (per - m->per_launch) / 4 : per;
    m->last_done = now, m->grown = 0;
    if (m->nspare < LB_MK_RING)
        m->spare[m->nspare++] = k->ev;
    m->head = (m->head + 1) % LB_MK_RING;
    m->count--;
}

void lb_mk_pending(struct lb_markers *m, int64_t now)
{
    /* Unmeasured, one batch is in flight at a time anyway: a figure that grows with the wait
     * would let more in (a second 1 s kernel queued 10 ms into the first). */
    if (m->count == 0 || m->per_launch <= 0)
        return;
    double least = per_launch_by(m, now); /* not complete at now: at least this */
    if (least > m->per_launch)
        m->per_launch = least;
}

void lb_mk_push(struct lb_markers *m, void *ev, int64_t now, uint32_t n)
{
    if (m->count >= LB_MK_RING)
        return;
    m->ring[(m->head + m->count) % LB_MK_RING] = (struct lb_marker){ev, now, n};
    m->count++;
}

void *lb_mk_spare(struct lb_markers *m) { return m->nspare ? m->spare[--m->nspare] : NULL; }
