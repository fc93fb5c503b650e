/* Graph memory the other modules tell graph.c about (graph.c's header comment says why it follows
 * graph allocations that outlive their graph's launch). */
#ifndef LB_GRAPH_H
#define LB_GRAPH_H

#include <stdint.h>

#include "symbols.h"

/* A pointer the memory hooks did not know was freed: maybe a graph allocation. */
void lb_graph_ptr_freed(CUdeviceptr p);

#endif
