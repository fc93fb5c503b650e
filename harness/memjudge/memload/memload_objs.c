/*
 * memload's CUDA objects: every allocation path (alloc KIND), graphs of allocation nodes, frees,
 * IPC handles and exported VMM allocations across processes, created contexts, resets, trims and
 * pool churn — the verbs a sequence runs (memload.c reads them).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "memload.h"

static const char *kind_names[] = {"", "mem", "mem1", "managed", "pitch", "pitch1", "array", "array1", "array3d",
                                   "array3d1", "mipmap", "async", "pool", "vmm", "vmmx", "module", "heap", "stack"};

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

/* The arrays' kinds: 4-byte texels 2048 wide, as many rows (and 512-deep slices) as the bytes fill. */
static CUresult array_create(struct obj *o, int k, size_t bytes)
{
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    CUDA_ARRAY_DESCRIPTOR ad = {2048, bytes / (2048 * 4), CU_AD_FORMAT_UNSIGNED_INT8, 4};
    CUDA_ARRAY3D_DESCRIPTOR a3 = {2048, 512, bytes / (2048 * 4 * 512), CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
    switch (k) {
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
    }
    return r;
}

/* Allocates bytes of kind k into o in the current context: the driver's result. */
static CUresult alloc_kind(struct obj *o, int k, size_t bytes)
{
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
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
    case K_ARRAY:
    case K_ARRAY1:
    case K_ARRAY3D:
    case K_ARRAY3D1:
    case K_MIPMAP: r = array_create(o, k, bytes); break;
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
    return r;
}

void cmd_alloc(long id, const char *kind, size_t bytes)
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
    o->dev = cur_dev;
    cuCtxGetCurrent(&o->ctx);
    o->size = bytes;
    CUresult r = alloc_kind(o, k, bytes);
    if (r == CUDA_SUCCESS)
        o->kind = k;
    else
        memset(o, 0, sizeof *o);
    result(r);
}

void cmd_graph(long id, long nodes, size_t bytes, int free_inside)
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

void cmd_free(long id)
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

void cmd_ipcget(long id)
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

void cmd_ipcopen(long id, const char *hex)
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

void cmd_vmmexport(long id)
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

void cmd_vmmimport(long id, int pid, int fd, size_t bytes)
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

void cmd_ctxcreate(long id, int dev)
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

void cmd_reset(int dev)
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

void cmd_trim(void)
{
    CUresult r = cuCtxSynchronize();
    for (int d = 0; d < MAXDEV && r == CUDA_SUCCESS; d++)
        if (pools[d])
            r = cuMemPoolTrimTo(pools[d], 0);
    if (r == CUDA_SUCCESS && cur_dev >= 0)
        r = cuDeviceGraphMemTrim(cur_dev);
    result(r);
}

void cmd_poolcycle(long n)
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
