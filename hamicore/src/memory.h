#ifndef LB_MEMORY_H
#define LB_MEMORY_H
void lb_memory_after_fork(void);
#endif
