/* The context hooks' API (context.c). A context's death (cuCtxDestroy, a primary context's reset or its last release): each module
 * that keeps something per context registers what it does then, from a constructor when the
 * library is loaded, and context.c calls them in slot order (then settles the pools' reserves):
 * the context's file never calls a module by name. */
#ifndef LB_CONTEXT_H
#define LB_CONTEXT_H

#include <stdint.h>

enum lb_ctx_gone_slot {
    LB_CTX_GONE_MEMORY,  /* the allocation tables' entries (charge.c) */
    LB_CTX_GONE_GRAPH,   /* graph allocations (graph.c) */
    LB_CTX_GONE_LIMITS,  /* raised context limits (ctxlimit.c) */
    LB_CTX_GONE_MODULES, /* modules' globals (modules.c) */
    LB_CTX_GONE_SLOTS
};
typedef void (*lb_ctx_gone_fn)(uintptr_t ctx);
/* Load time only (a constructor). */
void lb_ctx_on_gone(enum lb_ctx_gone_slot slot, lb_ctx_gone_fn fn);

#endif
