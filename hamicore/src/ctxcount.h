/* Contexts beyond a process's first on a GPU are charged (ctxcount.c). */
#ifndef LB_CTXCOUNT_H
#define LB_CTXCOUNT_H

#include "symbols.h"

/* What every context beyond a process's first on a GPU is charged: more than a context costs on
 * the GPUs measured (518 MiB on an H200 with CUDA 13), so the charge never falls short of it. */
#define LB_CTX_CHARGE (1ULL << 30)

/* A created context (cuCtxCreate*): begin before the driver (0: refused, CUDA_ERROR_OUT_OF_MEMORY),
 * end after it with its result; destroyed after cuCtxDestroy succeeded. */
int lb_ctx_created_begin(int ord, int *phys, const void *ra);
void lb_ctx_created_end(CUresult r, CUcontext ctx, int phys);
void lb_ctx_destroyed(CUcontext ctx);
/* The primary context of ordinal ord: begin before a retain (active: the driver says it already
 * is), end after it; gone after the release or reset that destroyed it. */
int lb_ctx_primary_begin(int ord, int *phys, int active, const void *ra);
void lb_ctx_primary_end(int ord, CUresult r, int phys);
void lb_ctx_primary_gone(int ord);

#endif
