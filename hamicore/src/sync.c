/* Synchronisation entry points: where the driver gives a memory pool's unused reserve back (down to
 * its release threshold). After each one the pools this process has charged are read again
 * (reserve.c), so that the memory stops counting against the pod at once — not only at this
 * process's next pool call, which may never come, while another process of the pod is refused
 * for it. One load when the process holds no pool charge. */
#include "guard.h"
#include "reserve.h"
#include "symbols.h"

#define SYNC(w, params, args)                                                                                       \
    LB_EXPORT CUresult w params                                                                                     \
    {                                                                                                               \
        __typeof__(&w) real = LB_REAL(w);                                                                           \
        if (!real)                                                                                                  \
            return CUDA_ERROR_NOT_FOUND;                                                                            \
        CUresult r = real args;                                                                                     \
        if (r == CUDA_SUCCESS && !lb_guard)                                                                         \
            lb_reserve_after_sync();                                                                                \
        return r;                                                                                                   \
    }

SYNC(cuCtxSynchronize, (void), ())
SYNC(cuStreamSynchronize, (CUstream s), (s))
SYNC(cuStreamSynchronize_ptsz, (CUstream s), (s))
SYNC(cuEventSynchronize, (CUevent e), (e))
