/* Memory the driver keeps in reserves of its own: stream-ordered pools and the graph memory
 * pool of each device. They are charged by what the driver reports as *reserved* (attributes
 * CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), read again
 * ("settled") after every call that can change it, so a pool whose release threshold keeps
 * freed memory is charged for it, and graph memory from the launch that maps it. */
#ifndef LB_RESERVE_H
#define LB_RESERVE_H

#include <stdint.h>

#include "symbols.h"

/* Bytes the allocation of `bytes` from the pool may add to its reserve (0: it fits in what the
 * pool holds unused); reads the driver. */
uint64_t lb_pool_growth(CUmemoryPool pool, uint64_t bytes);
/* Charge the pool's reserve as the driver reports it now; dev: the GPU (region index) a pool
 * not seen before is on. */
void lb_pool_settle(CUmemoryPool pool, int dev);
/* 1 if the pool is followed (a place in the pool table, made if need be); 0: the table is full. */
int lb_pool_follow(CUmemoryPool pool, int dev);
/* A destroyed pool: its charge and its place go. */
void lb_pool_forget(CUmemoryPool pool);
/* After a synchronisation: the pools that hold a charge are read again (sync.c). */
void lb_reserve_after_sync(void);
/* The same for the graph memory pool of CUDA ordinal ord, `live` bytes of whose reserve are held
 * by graph allocations in use outside their graphs (UINT64_MAX: not known, the driver's "used" is
 * taken); charged to the ordinal's GPU. */
uint64_t lb_graph_growth(int ord, uint64_t bytes, uint64_t live);
void lb_graph_settle(int ord);
/* Settle every known pool of the GPU (region index) and its graph memory: 1 if a charge went down. */
int lb_reserve_settle_all(int dev);
/* 1 if the stream is capturing (its allocations become graph nodes, charged at launch). */
int lb_stream_capturing(CUstream s);

#endif
