/* The one message of a process without a region (charge.c), for every hook that refuses then. */
#ifndef LB_NOREGION_H
#define LB_NOREGION_H
/* No region (the limits file cannot be read, the process could not open usage.cache for want of
 * descriptors, or not even a private one could be mapped): allocations are refused with
 * CUDA_ERROR_OUT_OF_MEMORY; one ERROR line per process, with lb_region_refusal's reason. */
void lb_log_no_region(const char *api) __attribute__((cold));
#endif
