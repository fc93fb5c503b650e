/* The wrapper table (procaddr.c): what an application gets for a driver entry point. */
#ifndef LB_PROCADDR_H
#define LB_PROCADDR_H

#include "symbols.h"

/* Our wrapper for an interposed name, or NULL. */
void *lb_sym_wrapper_by_name(const char *name);
/* Our wrapper for a real driver entry point of the table, or p itself. */
void *lb_sym_wrap_ptr(int lib, void *p);
/* What cuGetProcAddress(name, cudaVersion, flags) hands back when the driver answered p: the
 * wrapper of the row whose real entry p is; if p is none of them (a driver returning an internal
 * alias), the wrapper of the row the name/version/flags stand for (hooktable.h), provided the
 * driver exports that row's symbol; else p itself. */
void *lb_sym_wrap_proc(const char *name, int cudaVersion, cuuint64_t flags, void *p);

#endif
