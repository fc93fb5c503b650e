/* A container's own slices while the node scheduler does not drive its GPU (gateself.c). */
#ifndef LB_GATESELF_H
#define LB_GATESELF_H

#include <stdint.h>

#include "gatestate.h"

/* While the grant file names device d's GPU but the scheduler is away (its entry Off, or its beat
 * silent), a launch waits for the container's own slice: its limit's share of each period, by the
 * wall clock, at a phase of the container's own; the queue it leaves is bounded by what is left of
 * the slice (markers.h). Lock held (released while waiting). Returns 1: launch it, marked; 0: the
 * grant word changed while it waited (wp no longer reads w): decide again. */
int lb_gate_self_slice(int d, struct slow *sl, uint32_t limit, const _Atomic uint32_t *wp, uint32_t w) LB_GATE_HIDDEN;

#endif
