/*
 * memload: the C half of the memory judge (harness/memjudge). One process of a pod that does,
 * step by step, what the judge tells it: every device-memory path of the driver API — the ones
 * libvgpu.so hooks and the ones it should — plus the process behaviour that has let memory past
 * a limiter before (threads, fork with and without exec, descriptor churn and exhaustion, signal
 * handlers that allocate). It builds against the ABI headers only and links the libcuda.so.1 it
 * finds (fakegpu, or the real driver: `make -C harness/memjudge/memload real`).
 *
 * Protocol: one command per line on fd 0, one reply per line on fd 1 (fd 0/1 survive closing
 * every other descriptor). `memload` serves its standard input; `memload --connect PATH` first
 * connects to the judge's Unix socket (fork children, spawned processes). The first line is
 * "hello PID". A reply is "ok [values]" or "err CODE [what]" (CODE: the CUDA error, -1 for a
 * system error). Objects are named by the judge (ID), so a sequence replays exactly.
 *
 *   init DEV                cuInit, the primary context of ordinal DEV current; "ok UUID"
 *   use DEV                 make ordinal DEV's primary context current; "ok UUID"
 *   alloc ID KIND BYTES     KIND: mem mem1 managed pitch pitch1 array array1 array3d array3d1
 *                           mipmap async pool vmm vmmx module heap stack
 *   graph ID NODES BYTES F  a graph of NODES allocation nodes of BYTES/NODES each (F=1: each
 *                           freed inside the graph), instantiated and launched
 *   free ID                 frees what ID holds, the way its kind is freed
 *   ipcget ID               "ok HEX": the legacy IPC handle of allocation ID
 *   ipcopen ID HEX          opens it here
 *   vmmexport ID            "ok PID FD": VMM allocation ID (kind vmmx) as a descriptor
 *   vmmimport ID PID FD BYTES   takes PID's descriptor (pidfd_getfd), imports and maps it
 *   ctxcreate ID DEV        a created context on DEV, current ("ok UUID"); `free ID` destroys it and
 *                           says what is current then ("ok ORDINAL UUID CTXID", CTXID -1 for a
 *                           primary context; "ok none")
 *   reset DEV               cuDevicePrimaryCtxReset, then DEV's primary context again, current;
 *                           "ok UUID"
 *   trim                    synchronise, trim the pools and the graph memory
 *   poolcycle N             N times: a new pool, 2 MiB from it (freed), the pool destroyed
 *   burst THREADS N BYTES   THREADS threads, each N x (cuMemAlloc, cuMemFree); "ok GRANTED REFUSED"
 *   sigalloc BYTES N        N times: a timer signal whose handler allocates BYTES lands while
 *                           this thread is inside a (slowed) cuMemAlloc; "ok GRANTED REFUSED"
 *   sigfree                 frees what the handlers got
 *   fork PATH               a child without exec, served over PATH; "ok PID"
 *   spawn PATH              a child that execs memload --connect PATH; "ok PID"
 *   closeall                closes every descriptor but 0, 1, 2 (close_range)
 *   closecache PATH         opens PATH (the pod's usage.cache) and closes it again
 *   exhaust / unexhaust     fills the descriptor table (until EMFILE) / gives it back
 *   exit                    exits normally
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "limitbed/cuda_abi.h"

#define MAXOBJ 8192
#define MAXDEV 64
#define MIB (1024ULL * 1024ULL)

enum kind { K_NONE, K_MEM, K_MEM1, K_MANAGED, K_PITCH, K_PITCH1, K_ARRAY, K_ARRAY1, K_ARRAY3D, K_ARRAY3D1,
            K_MIPMAP, K_ASYNC, K_POOL, K_VMM, K_VMMX, K_MODULE, K_HEAP, K_STACK, K_GRAPH, K_IPC, K_IMPORT, K_CTX };

static const char *kind_names[] = {"", "mem", "mem1", "managed", "pitch", "pitch1", "array", "array1", "array3d",
                                   "array3d1", "mipmap", "async", "pool", "vmm", "vmmx", "module", "heap", "stack"};

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

static struct obj objs[MAXOBJ];
static CUcontext primary[MAXDEV];
static CUmemoryPool pools[MAXDEV];
static int cur_dev = -1;
static int *hoard, nhoard;
static void cmd_fork(const char *path, int exec);

/* The legacy entry points, as an old program reaches them: by name at an old version. */
typedef CUresult (*mem1_fn)(CUdeviceptr_v1 *, unsigned);
typedef CUresult (*free1_fn)(CUdeviceptr_v1);
typedef CUresult (*pitch1_fn)(CUdeviceptr_v1 *, unsigned *, unsigned, unsigned, unsigned);
typedef CUresult (*array1_fn)(CUarray *, const CUDA_ARRAY_DESCRIPTOR_v1 *);
typedef CUresult (*array3d1_fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR_v1 *);

static void *legacy(const char *name)
{
    void *p = NULL;
    return cuGetProcAddress(name, &p, 2000, 0) == CUDA_SUCCESS ? p : NULL;
}

static void reply(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    for (int off = 0; off < n;) {
        ssize_t w = write(1, buf + off, (size_t)(n - off));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(3); /* the judge is gone */
        off += (int)w;
    }
}

static int result(CUresult r)
{
    if (r == CUDA_SUCCESS)
        reply("ok");
    else
        reply("err %d", (int)r);
    return r == CUDA_SUCCESS;
}

static struct obj *obj_of(long id, int want_free)
{
    if (id < 0 || id >= MAXOBJ) {
        reply("err -1 object id %ld out of range", id);
        return NULL;
    }
    struct obj *o = &objs[id];
    if (want_free && o->kind != K_NONE) {
        reply("err -1 object %ld in use", id);
        return NULL;
    }
    if (!want_free && o->kind == K_NONE) {
        reply("err -1 object %ld unknown", id);
        return NULL;
    }
    return o;
}

static void forget_ctx(CUcontext c)
{
    for (int i = 0; i < MAXOBJ; i++)
        if (objs[i].kind != K_NONE && objs[i].kind != K_VMM && objs[i].kind != K_VMMX && objs[i].kind != K_IMPORT &&
            objs[i].ctx == c) {
            free(objs[i].graph_ptrs);
            memset(&objs[i], 0, sizeof objs[i]);
        }
}

static CUresult use(int dev)
{
    CUresult r = CUDA_SUCCESS;
    if (dev < 0 || dev >= MAXDEV)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!primary[dev])
        r = cuDevicePrimaryCtxRetain(&primary[dev], dev);
    if (r == CUDA_SUCCESS)
        r = cuCtxSetCurrent(primary[dev]);
    if (r == CUDA_SUCCESS)
        cur_dev = dev;
    return r;
}

static const char *uuid_str(const CUuuid *u)
{
    static char s[64];
    int o = snprintf(s, sizeof s, "GPU-");
    for (int i = 0; i < 16; i++)
        o += snprintf(s + o, sizeof s - (size_t)o, "%s%02x", i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "",
                      (unsigned char)u->bytes[i]);
    return s;
}

static void cmd_init(int dev)
{
    CUresult r = cuInit(0);
    if (r == CUDA_SUCCESS)
        r = use(dev);
    CUuuid u;
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetUuid(&u, dev);
    if (r != CUDA_SUCCESS) {
        result(r);
        return;
    }
    reply("ok %s", uuid_str(&u));
}

static CUmemoryPool pool_of(int dev)
{
    if (!pools[dev]) {
        CUmemPoolProps p;
        memset(&p, 0, sizeof p);
        p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.location.id = dev;
        if (cuMemPoolCreate(&pools[dev], &p) != CUDA_SUCCESS)
            pools[dev] = NULL;
    }
    return pools[dev];
}

/* A VMM allocation of `size`, mapped and accessible at a reserved range. */
static CUresult vmm_map(struct obj *o, size_t size, int fd_type)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = cur_dev;
    prop.requestedHandleTypes = fd_type ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
    CUresult r = cuMemCreate(&o->h, size, &prop, 0);
    if (r != CUDA_SUCCESS)
        return r;
    if ((r = cuMemAddressReserve(&o->ptr, size, 0, 0, 0)) != CUDA_SUCCESS) {
        cuMemRelease(o->h);
        return r;
    }
    CUmemAccessDesc a = {{CU_MEM_LOCATION_TYPE_DEVICE, cur_dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if ((r = cuMemMap(o->ptr, size, 0, o->h, 0)) != CUDA_SUCCESS || (r = cuMemSetAccess(o->ptr, size, &a, 1)) != CUDA_SUCCESS) {
        if (r != CUDA_SUCCESS)
            cuMemUnmap(o->ptr, size);
        cuMemAddressFree(o->ptr, size);
        cuMemRelease(o->h);
        return r;
    }
    return CUDA_SUCCESS;
}

/* A module whose one global array takes `bytes` of device memory. */
static CUresult module_load(struct obj *o, size_t bytes)
{
    char ptx[512];
    snprintf(ptx, sizeof ptx,
             ".version 7.0\n.target sm_50\n.address_size 64\n.visible .global .align 8 .b8 memload_data[%zu];\n"
             ".visible .entry memload_touch() { ret; }\n", bytes);
    return cuModuleLoadData((CUmodule *)&o->handle, ptx);
}

static CUresult set_limit(CUlimit l, size_t v)
{
    return cuCtxSetLimit(l, v);
}

static void cmd_alloc(long id, const char *kind, size_t bytes)
{
    struct obj *o = obj_of(id, 1);
    if (!o)
        return;
    int k = 0;
    for (int i = 1; i < (int)(sizeof kind_names / sizeof kind_names[0]); i++)
        if (!strcmp(kind, kind_names[i]))
            k = i;
    if (!k) {
        reply("err -1 unknown kind %s", kind);
        return;
    }
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    CUDA_ARRAY_DESCRIPTOR ad = {2048, bytes / (2048 * 4), CU_AD_FORMAT_UNSIGNED_INT8, 4};
    CUDA_ARRAY3D_DESCRIPTOR a3 = {2048, 512, bytes / (2048 * 4 * 512), CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
    o->dev = cur_dev;
    cuCtxGetCurrent(&o->ctx);
    o->size = bytes;
    switch (k) {
    case K_MEM: r = cuMemAlloc(&o->ptr, bytes); break;
    case K_MEM1: {
        mem1_fn f = (mem1_fn)legacy("cuMemAlloc");
        r = f ? f(&o->ptr1, (unsigned)bytes) : CUDA_ERROR_NOT_FOUND;
        break;
    }
    case K_MANAGED: r = cuMemAllocManaged(&o->ptr, bytes, CU_MEM_ATTACH_GLOBAL); break;
    case K_PITCH: {
        size_t pitch;
        r = cuMemAllocPitch(&o->ptr, &pitch, 1 << 20, bytes >> 20, 4);
        break;
    }
    case K_PITCH1: {
        pitch1_fn f = (pitch1_fn)legacy("cuMemAllocPitch");
        unsigned pitch;
        r = f ? f(&o->ptr1, &pitch, 1 << 20, (unsigned)(bytes >> 20), 4) : CUDA_ERROR_NOT_FOUND;
        break;
    }
    case K_ARRAY: r = cuArrayCreate((CUarray *)&o->handle, &ad); break;
    case K_ARRAY1: {
        array1_fn f = (array1_fn)legacy("cuArrayCreate");
        CUDA_ARRAY_DESCRIPTOR_v1 d = {2048, (unsigned)(bytes / (2048 * 4)), CU_AD_FORMAT_UNSIGNED_INT8, 4};
        r = f ? f((CUarray *)&o->handle, &d) : CUDA_ERROR_NOT_FOUND;
        break;
    }
    case K_ARRAY3D: r = cuArray3DCreate((CUarray *)&o->handle, &a3); break;
    case K_ARRAY3D1: {
        array3d1_fn f = (array3d1_fn)legacy("cuArray3DCreate");
        CUDA_ARRAY3D_DESCRIPTOR_v1 d = {2048, 512, (unsigned)(bytes / (2048 * 4 * 512)), CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
        r = f ? f((CUarray *)&o->handle, &d) : CUDA_ERROR_NOT_FOUND;
        break;
    }
    case K_MIPMAP: {
        /* Two levels: 4/5 of the bytes in level 0, 1/5 in level 1 (half of each dimension but
         * the depth, which is 1). */
        CUDA_ARRAY3D_DESCRIPTOR md = {2048, bytes * 4 / 5 / (2048 * 4), 0, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
        r = cuMipmappedArrayCreate((CUmipmappedArray *)&o->handle, &md, 2);
        break;
    }
    case K_ASYNC:
        r = cuMemAllocAsync(&o->ptr, bytes, NULL);
        break;
    case K_POOL: {
        CUmemoryPool p = pool_of(cur_dev);
        r = p ? cuMemAllocFromPoolAsync(&o->ptr, bytes, p, NULL) : CUDA_ERROR_OUT_OF_MEMORY;
        break;
    }
    case K_VMM: r = vmm_map(o, bytes, 0); break;
    case K_VMMX: r = vmm_map(o, bytes, 1); break;
    case K_MODULE: r = module_load(o, bytes); break;
    case K_HEAP: r = set_limit(CU_LIMIT_MALLOC_HEAP_SIZE, (8u << 20) + bytes); break;
    case K_STACK: {
        int sms = 0, threads = 0;
        cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cur_dev);
        cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, cur_dev);
        size_t per = sms > 0 && threads > 0 ? bytes / ((size_t)sms * (size_t)threads) : 0;
        r = per ? set_limit(CU_LIMIT_STACK_SIZE, 1024 + per) : CUDA_ERROR_INVALID_VALUE;
        break;
    }
    }
    if (r == CUDA_SUCCESS)
        o->kind = k;
    else
        memset(o, 0, sizeof *o);
    result(r);
}

static void cmd_graph(long id, long nodes, size_t bytes, int free_inside)
{
    struct obj *o = obj_of(id, 1);
    if (!o)
        return;
    if (nodes <= 0 || nodes > 100000) {
        reply("err -1 nodes");
        return;
    }
    CUgraph g;
    CUresult r = cuGraphCreate(&g, 0);
    if (r != CUDA_SUCCESS) {
        result(r);
        return;
    }
    CUdeviceptr *ptrs = calloc((size_t)nodes, sizeof *ptrs);
    CUgraphNode prev = NULL;
    size_t each = bytes / (size_t)nodes;
    for (long i = 0; i < nodes && r == CUDA_SUCCESS; i++) {
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        memset(&p, 0, sizeof p);
        p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.poolProps.location.id = cur_dev;
        p.bytesize = each;
        CUgraphNode n;
        r = cuGraphAddMemAllocNode(&n, g, prev ? &prev : NULL, prev ? 1 : 0, &p);
        ptrs[i] = p.dptr;
        prev = n;
        if (r == CUDA_SUCCESS && free_inside) {
            CUgraphNode f;
            r = cuGraphAddMemFreeNode(&f, g, &prev, 1, p.dptr);
            prev = f;
        }
    }
    CUgraphExec x = NULL;
    if (r == CUDA_SUCCESS)
        r = cuGraphInstantiateWithFlags(&x, g, 0);
    if (r == CUDA_SUCCESS)
        r = cuGraphLaunch(x, NULL);
    if (r == CUDA_SUCCESS)
        r = cuCtxSynchronize();
    cuGraphDestroy(g);
    if (r != CUDA_SUCCESS) {
        if (x)
            cuGraphExecDestroy(x);
        free(ptrs);
        result(r);
        return;
    }
    o->kind = K_GRAPH, o->dev = cur_dev, o->handle = x, o->size = bytes;
    cuCtxGetCurrent(&o->ctx);
    if (free_inside)
        free(ptrs);
    else
        o->graph_ptrs = ptrs, o->ngraph_ptrs = (size_t)nodes;
    reply("ok");
}

static CUresult free_obj(struct obj *o)
{
    CUresult r = CUDA_SUCCESS;
    switch (o->kind) {
    case K_MEM: case K_MANAGED: case K_PITCH: r = cuMemFree(o->ptr); break;
    case K_MEM1: case K_PITCH1: {
        free1_fn f = (free1_fn)legacy("cuMemFree");
        r = f ? f(o->ptr1) : CUDA_ERROR_NOT_FOUND;
        break;
    }
    case K_ARRAY: case K_ARRAY1: case K_ARRAY3D: case K_ARRAY3D1: r = cuArrayDestroy((CUarray)o->handle); break;
    case K_MIPMAP: r = cuMipmappedArrayDestroy((CUmipmappedArray)o->handle); break;
    case K_ASYNC: case K_POOL:
        r = cuMemFreeAsync(o->ptr, NULL);
        if (r == CUDA_SUCCESS)
            r = cuStreamSynchronize(NULL);
        break;
    case K_VMM: case K_VMMX: case K_IMPORT:
        r = cuMemUnmap(o->ptr, o->size);
        if (r == CUDA_SUCCESS)
            r = cuMemAddressFree(o->ptr, o->size);
        if (r == CUDA_SUCCESS)
            r = cuMemRelease(o->h);
        if (o->fd > 0)
            close(o->fd);
        break;
    case K_MODULE: r = cuModuleUnload((CUmodule)o->handle); break;
    case K_HEAP: r = set_limit(CU_LIMIT_MALLOC_HEAP_SIZE, 8u << 20); break;
    case K_STACK: r = set_limit(CU_LIMIT_STACK_SIZE, 1024); break;
    case K_GRAPH:
        for (size_t i = 0; i < o->ngraph_ptrs && r == CUDA_SUCCESS; i++)
            r = cuMemFree(o->graph_ptrs[i]);
        if (r == CUDA_SUCCESS)
            r = cuGraphExecDestroy((CUgraphExec)o->handle);
        if (r == CUDA_SUCCESS)
            r = cuDeviceGraphMemTrim(o->dev);
        free(o->graph_ptrs);
        break;
    case K_IPC: r = cuIpcCloseMemHandle(o->ptr); break;
    case K_CTX:
        r = cuCtxDestroy((CUcontext)o->handle);
        if (r == CUDA_SUCCESS)
            forget_ctx((CUcontext)o->handle);
        break;
    }
    return r;
}

static void cmd_free(long id)
{
    struct obj *o = obj_of(id, 0);
    if (!o)
        return;
    /* Free in the context the object was made in (a created context may not be current). */
    CUcontext was = NULL;
    cuCtxGetCurrent(&was);
    if (o->ctx && o->ctx != was && o->kind != K_CTX)
        cuCtxSetCurrent(o->ctx);
    int ctx = o->kind == K_CTX;
    CUresult r = free_obj(o);
    if (o->ctx && o->ctx != was && !ctx)
        cuCtxSetCurrent(was);
    if (r == CUDA_SUCCESS)
        memset(o, 0, sizeof *o);
    if (r != CUDA_SUCCESS || !ctx) {
        result(r);
        return;
    }
    /* A destroyed context leaves whatever was below it current: say which (ordinal, UUID, and the
     * created context's id, -1 for a primary one, or "none"). */
    CUcontext now = NULL;
    CUdevice d;
    CUuuid u;
    cuCtxGetCurrent(&now);
    if (!now || cuCtxGetDevice(&d) != CUDA_SUCCESS || cuDeviceGetUuid(&u, d) != CUDA_SUCCESS) {
        cur_dev = -1;
        reply("ok none");
        return;
    }
    cur_dev = d;
    long cid = -1;
    for (int i = 0; i < MAXOBJ; i++)
        if (objs[i].kind == K_CTX && objs[i].handle == (void *)now)
            cid = i;
    reply("ok %d %s %ld", d, uuid_str(&u), cid);
}

static void cmd_ipcget(long id)
{
    struct obj *o = obj_of(id, 0);
    if (!o)
        return;
    CUipcMemHandle h;
    CUresult r = cuIpcGetMemHandle(&h, o->ptr);
    if (r != CUDA_SUCCESS) {
        result(r);
        return;
    }
    char hex[2 * CU_IPC_HANDLE_SIZE + 1];
    for (int i = 0; i < CU_IPC_HANDLE_SIZE; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)h.reserved[i]);
    reply("ok %s", hex);
}

static void cmd_ipcopen(long id, const char *hex)
{
    struct obj *o = obj_of(id, 1);
    if (!o)
        return;
    CUipcMemHandle h;
    if (strlen(hex) != 2 * CU_IPC_HANDLE_SIZE) {
        reply("err -1 handle");
        return;
    }
    for (int i = 0; i < CU_IPC_HANDLE_SIZE; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        h.reserved[i] = (char)v;
    }
    CUresult r = cuIpcOpenMemHandle(&o->ptr, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (r == CUDA_SUCCESS) {
        o->kind = K_IPC, o->dev = cur_dev;
        cuCtxGetCurrent(&o->ctx);
        CUdeviceptr base;
        cuMemGetAddressRange(&base, &o->size, o->ptr);
    }
    result(r);
}

static void cmd_vmmexport(long id)
{
    struct obj *o = obj_of(id, 0);
    if (!o)
        return;
    int fd = -1;
    CUresult r = cuMemExportToShareableHandle(&fd, o->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) {
        result(r);
        return;
    }
    if (o->fd > 0)
        close(o->fd);
    o->fd = fd; /* kept open until the object is freed, for the importer to take */
    reply("ok %d %d", (int)getpid(), fd);
}

static void cmd_vmmimport(long id, int pid, int fd, size_t bytes)
{
    struct obj *o = obj_of(id, 1);
    if (!o)
        return;
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    int mine = pfd >= 0 ? (int)syscall(SYS_pidfd_getfd, pfd, fd, 0) : -1;
    int e = errno;
    if (pfd >= 0)
        close(pfd);
    if (mine < 0) {
        reply("err -1 pidfd_getfd %d/%d: %s", pid, fd, strerror(e));
        return;
    }
    CUresult r = cuMemImportFromShareableHandle(&o->h, (void *)(intptr_t)mine, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(mine);
    if (r == CUDA_SUCCESS && (r = cuMemAddressReserve(&o->ptr, bytes, 0, 0, 0)) == CUDA_SUCCESS) {
        CUmemAccessDesc a = {{CU_MEM_LOCATION_TYPE_DEVICE, cur_dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        if ((r = cuMemMap(o->ptr, bytes, 0, o->h, 0)) == CUDA_SUCCESS)
            r = cuMemSetAccess(o->ptr, bytes, &a, 1);
        if (r != CUDA_SUCCESS) {
            cuMemAddressFree(o->ptr, bytes);
            cuMemRelease(o->h);
        }
    } else if (r == CUDA_SUCCESS) {
        cuMemRelease(o->h);
    }
    if (r == CUDA_SUCCESS)
        o->kind = K_IMPORT, o->size = bytes, o->dev = cur_dev, o->fd = -1;
    else
        memset(o, 0, sizeof *o);
    result(r);
}

static void cmd_ctxcreate(long id, int dev)
{
    struct obj *o = obj_of(id, 1);
    if (!o)
        return;
    CUcontext c;
    CUresult r = cuCtxCreate(&c, 0, dev);
    CUuuid u;
    if (r == CUDA_SUCCESS) {
        o->kind = K_CTX, o->handle = c, o->dev = dev, o->ctx = c;
        cur_dev = dev;
        r = cuDeviceGetUuid(&u, dev);
    }
    if (r != CUDA_SUCCESS) {
        result(r);
        return;
    }
    reply("ok %s", uuid_str(&u));
}

static void cmd_reset(int dev)
{
    if (dev < 0 || dev >= MAXDEV) {
        reply("err -1 device");
        return;
    }
    CUresult r = cuDevicePrimaryCtxReset(dev);
    if (r == CUDA_SUCCESS && primary[dev]) {
        forget_ctx(primary[dev]);
        if (pools[dev])
            pools[dev] = NULL; /* a reset destroys the pools made in the context's device's scope */
        primary[dev] = NULL;
    }
    if (r != CUDA_SUCCESS) {
        result(r);
        return;
    }
    cmd_init(dev); /* retained again and current, as a runtime would at its next call; "ok UUID" */
}

static void cmd_trim(void)
{
    CUresult r = cuCtxSynchronize();
    for (int d = 0; d < MAXDEV && r == CUDA_SUCCESS; d++)
        if (pools[d])
            r = cuMemPoolTrimTo(pools[d], 0);
    if (r == CUDA_SUCCESS && cur_dev >= 0)
        r = cuDeviceGraphMemTrim(cur_dev);
    result(r);
}

static void cmd_poolcycle(long n)
{
    CUresult r = CUDA_SUCCESS;
    for (long i = 0; i < n && r == CUDA_SUCCESS; i++) {
        CUmemPoolProps p;
        memset(&p, 0, sizeof p);
        p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.location.id = cur_dev;
        CUmemoryPool pool;
        CUdeviceptr d;
        if ((r = cuMemPoolCreate(&pool, &p)) != CUDA_SUCCESS)
            break;
        if ((r = cuMemAllocFromPoolAsync(&d, 2 * MIB, pool, NULL)) == CUDA_SUCCESS)
            r = cuMemFreeAsync(d, NULL);
        if (r == CUDA_SUCCESS)
            r = cuStreamSynchronize(NULL);
        CUresult r2 = cuMemPoolDestroy(pool);
        if (r == CUDA_SUCCESS)
            r = r2;
    }
    result(r);
}

struct burst {
    CUcontext ctx;
    long n;
    size_t bytes;
    long granted, refused;
};

static void *burst_thread(void *arg)
{
    struct burst *b = arg;
    cuCtxSetCurrent(b->ctx);
    for (long i = 0; i < b->n; i++) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, b->bytes) == CUDA_SUCCESS) {
            b->granted++;
            cuMemFree(p);
        } else {
            b->refused++;
        }
    }
    return NULL;
}

static void cmd_burst(int threads, long n, size_t bytes)
{
    if (threads <= 0 || threads > 64) {
        reply("err -1 threads");
        return;
    }
    pthread_t t[64];
    struct burst b[64];
    CUcontext c = NULL;
    cuCtxGetCurrent(&c);
    for (int i = 0; i < threads; i++) {
        b[i] = (struct burst){c, n, bytes, 0, 0};
        pthread_create(&t[i], NULL, burst_thread, &b[i]);
    }
    long g = 0, f = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        g += b[i].granted, f += b[i].refused;
    }
    reply("ok %ld %ld", g, f);
}

/* Signal handlers that allocate. The handler's allocations are kept (up to SIGMAX) and freed by
 * `sigfree`; they happen while this thread is inside a cuMemAlloc the driver makes slow. */
#define SIGMAX 256
static CUdeviceptr sig_ptrs[SIGMAX];
static atomic_int sig_n, sig_refused;
static size_t sig_bytes;

static void on_alarm(int sig)
{
    (void)sig;
    int saved = errno;
    CUdeviceptr p;
    if (cuMemAlloc(&p, sig_bytes) == CUDA_SUCCESS) {
        int i = atomic_fetch_add(&sig_n, 1);
        if (i < SIGMAX)
            sig_ptrs[i] = p;
    } else {
        atomic_fetch_add(&sig_refused, 1);
    }
    errno = saved;
}

static void cmd_sigalloc(size_t bytes, int n)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    sig_bytes = bytes;
    int before = atomic_load(&sig_n), refused_before = atomic_load(&sig_refused);
    /* fakegpu: each allocation stays 30 ms in the driver (a real driver lacks the call: the signal
     * then lands wherever it lands) */
    void (*delay)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "fakegpuSetAllocDelayMs");
    if (delay)
        delay(30);
    for (int i = 0; i < n && atomic_load(&sig_n) < SIGMAX; i++) {
        struct itimerval it = {{0, 0}, {0, 10000}}; /* fires 10 ms into the slowed call */
        setitimer(ITIMER_REAL, &it, NULL);
        CUdeviceptr p;
        if (cuMemAlloc(&p, 2 * MIB) == CUDA_SUCCESS)
            cuMemFree(p);
        struct timespec ts = {0, 30000000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    if (delay)
        delay(0);
    reply("ok %d %d", atomic_load(&sig_n) - before, atomic_load(&sig_refused) - refused_before);
}

static void cmd_sigfree(void)
{
    int n = atomic_exchange(&sig_n, 0);
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < n && i < SIGMAX; i++)
        if (cuMemFree(sig_ptrs[i]) != CUDA_SUCCESS)
            r = CUDA_ERROR_INVALID_VALUE;
    result(r);
}

static int connect_to(const char *path)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (s < 0 || strlen(path) >= sizeof a.sun_path)
        return -1;
    strcpy(a.sun_path, path);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0 || dup2(s, 0) != 0 || dup2(s, 1) != 1) {
        close(s);
        return -1;
    }
    close(s);
    return 0;
}

static char self[4096];

static void cmd_fork(const char *path, int exec)
{
    pid_t pid = fork();
    if (pid < 0) {
        reply("err -1 fork: %s", strerror(errno));
        return;
    }
    if (pid == 0) {
        if (exec) {
            execl(self, self, "--connect", path, (char *)NULL);
            _exit(126);
        }
        /* Without exec: a new process of the pod with the parent's memory image but no CUDA
         * objects of its own (the driver gives a child none). The parent's hoard of descriptors
         * is not the child's: given back, so that it can reach the judge. */
        while (nhoard > 0)
            close(hoard[--nhoard]);
        if (connect_to(path) != 0)
            _exit(125);
        for (int i = 0; i < MAXOBJ; i++)
            if (objs[i].fd > 0)
                objs[i].fd = -1;
        memset(objs, 0, sizeof objs);
        memset(primary, 0, sizeof primary);
        memset(pools, 0, sizeof pools);
        cur_dev = -1;
        reply("hello %d", (int)getpid());
        return;
    }
    reply("ok %d", (int)pid);
}

static void cmd_exhaust(void)
{
    int cap = 1 << 20;
    if (!hoard)
        hoard = malloc(sizeof *hoard * (size_t)cap);
    int fd;
    while (hoard && nhoard < cap && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        hoard[nhoard++] = fd;
    reply("ok %d", nhoard);
}

static void cmd_unexhaust(void)
{
    while (nhoard > 0)
        close(hoard[--nhoard]);
    reply("ok");
}

/* A reaper for children we forked: the judge watches them through their own connections. */
static void on_child(int sig)
{
    (void)sig;
    int saved = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    errno = saved;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--connect")) {
        if (connect_to(argv[2]) != 0) {
            fprintf(stderr, "memload: cannot connect to %s: %s\n", argv[2], strerror(errno));
            return 2;
        }
    } else if (argc != 1) {
        fprintf(stderr, "usage: memload [--connect SOCKET]\n");
        return 2;
    }
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0)
        self[n] = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_child;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGCHLD, &sa, NULL);
    reply("hello %d", (int)getpid());
    char line[1024];
    size_t len = 0;
    for (;;) {
        ssize_t got = read(0, line + len, 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return 0;
        if (line[len] != '\n') {
            if (len < sizeof line - 1)
                len++;
            continue;
        }
        line[len] = 0;
        len = 0;
        char op[32] = "", a1[256] = "", a2[256] = "", a3[64] = "", a4[64] = "";
        int nf = sscanf(line, "%31s %255s %255s %63s %63s", op, a1, a2, a3, a4);
        if (nf < 1)
            continue;
        long id = strtol(a1, NULL, 10);
        if (!strcmp(op, "init"))
            cmd_init((int)id);
        else if (!strcmp(op, "use"))
            cmd_init((int)id); /* cuInit again is a no-op: the same reply, with the UUID */
        else if (!strcmp(op, "alloc"))
            cmd_alloc(id, a2, strtoull(a3, NULL, 10));
        else if (!strcmp(op, "graph"))
            cmd_graph(id, strtol(a2, NULL, 10), strtoull(a3, NULL, 10), atoi(a4));
        else if (!strcmp(op, "free"))
            cmd_free(id);
        else if (!strcmp(op, "ipcget"))
            cmd_ipcget(id);
        else if (!strcmp(op, "ipcopen"))
            cmd_ipcopen(id, a2);
        else if (!strcmp(op, "vmmexport"))
            cmd_vmmexport(id);
        else if (!strcmp(op, "vmmimport"))
            cmd_vmmimport(id, atoi(a2), atoi(a3), strtoull(a4, NULL, 10));
        else if (!strcmp(op, "ctxcreate"))
            cmd_ctxcreate(id, atoi(a2));
        else if (!strcmp(op, "reset"))
            cmd_reset((int)id);
        else if (!strcmp(op, "trim"))
            cmd_trim();
        else if (!strcmp(op, "poolcycle"))
            cmd_poolcycle(id);
        else if (!strcmp(op, "burst"))
            cmd_burst((int)id, strtol(a2, NULL, 10), strtoull(a3, NULL, 10));
        else if (!strcmp(op, "sigalloc"))
            cmd_sigalloc(strtoull(a1, NULL, 10), atoi(a2));
        else if (!strcmp(op, "sigfree"))
            cmd_sigfree();
        else if (!strcmp(op, "fork") || !strcmp(op, "spawn"))
            cmd_fork(a1, !strcmp(op, "spawn"));
        else if (!strcmp(op, "closeall"))
            reply(syscall(SYS_close_range, 3u, ~0u, 0) == 0 ? "ok" : "err -1 close_range");
        else if (!strcmp(op, "closecache")) {
            int fd = open(a1, O_RDONLY | O_CLOEXEC);
            if (fd >= 0)
                close(fd);
            reply(fd >= 0 ? "ok" : "err -1 open %s", a1);
        } else if (!strcmp(op, "exhaust"))
            cmd_exhaust();
        else if (!strcmp(op, "unexhaust"))
            cmd_unexhaust();
        else if (!strcmp(op, "exit"))
            exit(0);
        else
            reply("err -1 unknown command %s", op);
    }
}
