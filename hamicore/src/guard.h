/* The per-thread reentrancy guard: > 0 while this thread runs our initialisation or is inside a
 * driver call we made. Wrappers reached in that window (our own init, a driver calling its own
 * exported entry points) pass straight through. Its own header so that the bottom layers
 * (symbols, tables) need nothing of the initialisation. */
#ifndef LB_GUARD_H
#define LB_GUARD_H

extern _Thread_local int lb_guard __attribute__((tls_model("initial-exec")));
static inline void lb_guard_enter(void) { lb_guard++; }
static inline void lb_guard_leave(void) { lb_guard--; }

#endif
