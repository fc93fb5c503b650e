#ifndef LB_MEMORY_H
#define LB_MEMORY_H
#include <stdint.h>
/* The context was destroyed (or reset) by the driver: everything allocated in it is released. */
void lb_memory_ctx_gone(uintptr_t ctx);
/* No region (the limits file cannot be read, the process could not open usage.cache for want of
 * descriptors, or not even a private one could be mapped): allocations are refused with
 * CUDA_ERROR_OUT_OF_MEMORY; one ERROR line per process, with lb_region_refusal's reason. */
void lb_log_no_region(const char *api) __attribute__((cold));
/* A destroyed context: what its raised limits (ctxlimit.c) and its modules (modules.c) held. */
void lb_ctxlimit_gone(uintptr_t ctx);
void lb_modules_ctx_gone(uintptr_t ctx);
#endif
