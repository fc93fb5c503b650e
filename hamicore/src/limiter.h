/* The compute limiter: CUDA_DEVICE_SM_LIMIT as a share of GPU time (limiter.c). */
#ifndef LB_LIMITER_H
#define LB_LIMITER_H

#include <stdint.h>

/* Set once at initialization: 1 if some device has a compute limit (1..99 %) and the policy is
 * not "disable". 0 keeps every launch on the pass-through path (no watcher thread either). */
extern int lb_launch_limited;

void lb_limiter_init(void);
void lb_limiter_after_fork(void);
/* Wait until device dev may start work of `blocks` thread blocks, then charge them. */
void lb_limiter_take(int dev, uint64_t blocks);

#endif
