/* The per-thread reentrancy guard: > 0 while this thread runs our initialisation or is inside a
 * driver call we made. A wrapper reached in that window passes straight through only when the
 * driver itself called it (a driver calling its own exported entry points: the caller's return
 * address is in the driver's code, lb_from_driver); anything else reached then is a signal
 * handler that interrupted this thread inside one of our hooks, and is refused rather than passed
 * through uncharged (it cannot be charged safely there: the hook it interrupted may hold a lock of
 * ours). Its own header so that the bottom layers (symbols, tables) need nothing of the
 * initialisation. */
#ifndef LB_GUARD_H
#define LB_GUARD_H

#include <pthread.h>

extern _Thread_local int lb_guard __attribute__((tls_model("initial-exec")));
static inline void lb_guard_enter(void) { lb_guard++; }
static inline void lb_guard_leave(void) { lb_guard--; }
/* 1 if ra (a wrapper's return address) is in the code of libcuda.so.1 or libnvidia-ml.so.1
 * (symbols.c: their executable segments, noted when they are loaded). */
int lb_from_driver(const void *ra);
/* What a wrapper does while the guard is up: 0 pass through (the driver's own call), -1 refuse. */
static inline int lb_guarded(const void *ra) { return lb_from_driver(ra) ? 0 : -1; }
/* The library's own locks (and its one-time work) are held with the guard up: a signal handler
 * that interrupts the thread there and calls a wrapper is refused (lb_guarded) instead of waiting
 * forever for a lock its own thread holds. Not in fork handlers: nothing runs a wrapper there. */
static inline void lb_lock(pthread_mutex_t *m)
{
    lb_guard_enter();
    pthread_mutex_lock(m);
}
static inline void lb_unlock(pthread_mutex_t *m)
{
    pthread_mutex_unlock(m);
    lb_guard_leave();
}

#endif
