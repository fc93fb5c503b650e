#ifndef LB_MEMORY_H
#define LB_MEMORY_H
#include <stdint.h>
/* The context was destroyed (or reset) by the driver: everything allocated in it is released. */
void lb_memory_ctx_gone(uintptr_t ctx);
/* No region (not even a private one) could be attached: allocations are refused with
 * CUDA_ERROR_OUT_OF_MEMORY; one ERROR line per process. */
void lb_log_no_region(const char *api) __attribute__((cold));
#endif
