/*
 * Events: a marker in a process's work queue on one GPU. fakegpu has one queue per process and unit
 * (timeline.c), whatever the stream, so an event recorded now completes when every kernel this
 * process had queued on that unit by then has run: kernels submitted so far (counted here) minus
 * those still queued. That is what a compute limiter needs of events (libvgpu.so times its queue
 * with them); timing (cuEventElapsedTime) is not simulated, and a record into a capturing stream
 * is refused with CUDA_ERROR_NOT_SUPPORTED (fakegpu's graphs have no event nodes).
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "cuda_internal.h"

#define FG_MAX_EVENTS 4096
#define FG_EVENT_LIVE 0x45564e54u /* "EVNT" */

typedef struct fg_event {
    uint32_t magic;
    int recorded;
    unsigned unit;
    uint64_t target; /* kernels submitted on the unit before it */
} fg_event;

static fg_event events[FG_MAX_EVENTS];
static uint64_t submitted[FG_MAX_UNITS]; /* this process's kernels queued per unit, ever; state lock held */

void fg_event_submitted(unsigned unit) { submitted[unit]++; }

static void after_fork_child(void) {
    /* The child's queues are its own and empty: what its parent recorded is complete for it. */
    for (unsigned u = 0; u < FG_MAX_UNITS; u++)
        submitted[u] = 0;
    for (int i = 0; i < FG_MAX_EVENTS; i++)
        events[i].recorded = 0;
}

static void __attribute__((constructor)) event_register_fork(void) { pthread_atfork(NULL, NULL, after_fork_child); }

static fg_event *event_of(CUevent h) {
    uintptr_t p = (uintptr_t)h, b = (uintptr_t)events;
    if (p < b || p >= b + sizeof events || (p - b) % sizeof events[0])
        return NULL;
    fg_event *e = (fg_event *)h;
    return __atomic_load_n(&e->magic, __ATOMIC_ACQUIRE) == FG_EVENT_LIVE ? e : NULL;
}

FG_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags) {
    fg_ctx *c;
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!phEvent || (Flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = fg_cu_need_ctx(&c)) != CUDA_SUCCESS)
        return r;
    for (int i = 0; i < FG_MAX_EVENTS; i++) {
        uint32_t expect = 0;
        if (__atomic_compare_exchange_n(&events[i].magic, &expect, FG_EVENT_LIVE, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            events[i].recorded = 0;
            events[i].unit = fg_cu.dev[c->dev].unit;
            *phEvent = (CUevent)&events[i];
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

FG_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    fg_event *e = event_of(hEvent);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    __atomic_store_n(&e->magic, 0, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuEventDestroy(CUevent hEvent) { return cuEventDestroy_v2(hEvent); }

FG_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
    fg_ctx *c;
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    fg_event *e = event_of(hEvent);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((r = fg_cu_need_ctx(&c)) != CUDA_SUCCESS)
        return r;
    CUstreamCaptureStatus cs;
    if ((r = cuStreamIsCapturing(hStream, &cs)) != CUDA_SUCCESS)
        return r;
    if (cs != CU_STREAM_CAPTURE_STATUS_NONE)
        return CUDA_ERROR_NOT_SUPPORTED;
    unsigned unit = fg_cu.dev[c->dev].unit;
    if (fg_state_lock(&fg_cu.st) != 0)
        return CUDA_ERROR_UNKNOWN;
    e->unit = unit;
    e->target = submitted[unit];
    e->recorded = 1;
    fg_state_unlock(&fg_cu.st);
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) { return cuEventRecord(hEvent, hStream); }

FG_EXPORT CUresult cuEventQuery(CUevent hEvent) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    fg_event *e = event_of(hEvent);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!e->recorded)
        return CUDA_SUCCESS; /* as the driver: an event never recorded is complete */
    if (fg_state_lock(&fg_cu.st) != 0)
        return CUDA_ERROR_UNKNOWN;
    int ci = fg_state_queue(&fg_cu.st, e->unit, 0);
    uint64_t queued = ci < 0 ? 0 : fg_cu.st.sh->chan[ci].count;
    uint64_t done = submitted[e->unit] - queued;
    fg_state_unlock(&fg_cu.st);
    return done >= e->target ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FG_EXPORT CUresult cuEventSynchronize(CUevent hEvent) {
    for (;;) {
        CUresult r = cuEventQuery(hEvent);
        if (r != CUDA_ERROR_NOT_READY)
            return r;
        struct timespec ts = {0, 200000};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
            ;
    }
}

/* fakegpu does not enforce capture modes; the per-thread mode is kept so that a caller switching
 * modes around its own calls gets back what it set. */
static _Thread_local CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

FG_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}
