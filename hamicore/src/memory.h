#ifndef LB_MEMORY_H
#define LB_MEMORY_H
#include <stdint.h>
/* The context was destroyed (or reset) by the driver: everything allocated in it is released. */
void lb_memory_ctx_gone(uintptr_t ctx);
#endif
