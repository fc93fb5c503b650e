/* The launch gate's helper thread (gatehelper.c): while the process holds a slice it reports its
 * drains, releases it when idle and finds a silent scheduler. */
#ifndef LB_GATEHELPER_H
#define LB_GATEHELPER_H

#include "gatestate.h"

/* Starts the helper thread, or wakes it: the process joined a slice. */
void lb_gate_ensure_helper(void) LB_GATE_HIDDEN;
/* In a forked child: no helper runs there yet. */
void lb_gate_helper_after_fork(void) LB_GATE_HIDDEN;

#endif
