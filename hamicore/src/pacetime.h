/* The fallback pacing's timing (pacetime.c): an event after every launch the pacing let through,
 * polled by the launchers and the watcher thread, and the GPU-time ledger it keeps per device
 * (ledger.h). The launch paths (launch.c, graphwork.c) call lb_pace_launched after the driver. */
#ifndef LB_PACETIME_H
#define LB_PACETIME_H

#include <stdint.h>

#include "limitbed/cuda_abi.h"

/* At initialization and in a fork child (the parent's events are not the child's). */
void lb_pace_reset(void);
/* The launch about to be made by this thread on device dev was paced: lb_pace_launched times it. */
void lb_pace_taken(int dev);
/* After a launch on device dev into stream s (per_thread: a _ptsz entry point) returned r: if it
 * was paced (lb_pace_taken), an event follows it; a launch into a capturing stream runs nothing
 * and is not timed (its graph's launches are). Nothing for any other launch. */
void lb_pace_launched(int dev, CUstream s, int per_thread, CUresult r);
/* May a paced launch on device dev go now, at share_ppm of the device's time (lb_lg_room)? The
 * completed launches are charged first. */
int lb_pace_may(int dev, uint32_t share_ppm, int64_t now);
/* The watcher's look at device dev (the completions since the last look are charged): the GPU ns a
 * launch takes (lb_lg_launch_ns), 1 in *measured once a launch was seen complete, and 1 in *busy
 * while launches are in flight or waiting for the ledger. */
int64_t lb_pace_poll(int dev, int64_t now, int *busy, int *measured);
/* A launcher waits for the ledger (the watcher keeps running meanwhile). */
void lb_pace_waiting(int dev, int delta);

#endif
