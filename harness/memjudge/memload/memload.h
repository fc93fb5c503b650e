/*
 * memload's shared parts: memload_state.c holds the state and the replies every verb uses;
 * memload_objs.c the verbs that make and free CUDA objects; memload.c the protocol, the
 * process-level verbs and main. Calls go one way: memload.c -> memload_objs.c -> memload_state.c.
 * Builds against the ABI headers only.
 */
#ifndef MEMLOAD_H
#define MEMLOAD_H

#include <stddef.h>

#include "limitbed/cuda_abi.h"

#define MAXOBJ 8192
#define MAXDEV 64
#define MIB (1024ULL * 1024ULL)

enum kind { K_NONE, K_MEM, K_MEM1, K_MANAGED, K_PITCH, K_PITCH1, K_ARRAY, K_ARRAY1, K_ARRAY3D, K_ARRAY3D1,
            K_MIPMAP, K_ASYNC, K_POOL, K_VMM, K_VMMX, K_MODULE, K_HEAP, K_STACK, K_GRAPH, K_IPC, K_IMPORT, K_CTX };

struct obj {
    int kind, dev;
    CUcontext ctx;
    CUdeviceptr ptr;
    CUdeviceptr_v1 ptr1;
    void *handle; /* CUarray, CUmipmappedArray, CUmodule, CUgraphExec */
    CUmemGenericAllocationHandle h;
    size_t size;
    CUdeviceptr *graph_ptrs; /* a graph's allocations not freed inside it */
    size_t ngraph_ptrs;
    int fd;
};

/* memload_state.c: the objects a sequence named (its IDs), each process's primary contexts and
 * pools by ordinal, the current ordinal (-1 before init). */
extern struct obj objs[MAXOBJ];
extern CUcontext primary[MAXDEV];
extern CUmemoryPool pools[MAXDEV];
extern int cur_dev;

/* The legacy entry points, as an old program reaches them: by name at an old version. */
typedef CUresult (*mem1_fn)(CUdeviceptr_v1 *, unsigned);
typedef CUresult (*free1_fn)(CUdeviceptr_v1);
typedef CUresult (*pitch1_fn)(CUdeviceptr_v1 *, unsigned *, unsigned, unsigned, unsigned);
typedef CUresult (*array1_fn)(CUarray *, const CUDA_ARRAY_DESCRIPTOR_v1 *);
typedef CUresult (*array3d1_fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR_v1 *);

void *legacy(const char *name);
/* One reply line ("ok ..." / "err CODE ...") on fd 1; result: "ok" or "err CODE", and whether ok. */
void reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int result(CUresult r);
/* Object id, to be made (want_free) or known; NULL after replying with the error. */
struct obj *obj_of(long id, int want_free);
/* A destroyed or reset context's objects are gone with it. */
void forget_ctx(CUcontext c);
/* Ordinal dev's primary context, current. */
CUresult use(int dev);
const char *uuid_str(const CUuuid *u);
/* init DEV: cuInit, ordinal DEV's primary context current; "ok UUID". */
void cmd_init(int dev);

/* memload_objs.c: the verbs that make and free CUDA objects. */
void cmd_alloc(long id, const char *kind, size_t bytes);
void cmd_graph(long id, long nodes, size_t bytes, int free_inside);
void cmd_free(long id);
void cmd_ipcget(long id);
void cmd_ipcopen(long id, const char *hex);
void cmd_vmmexport(long id);
void cmd_vmmimport(long id, int pid, int fd, size_t bytes);
void cmd_ctxcreate(long id, int dev);
void cmd_reset(int dev);
void cmd_trim(void);
void cmd_poolcycle(long n);

#endif
