/*
 * The virtual memory management API with the driver's lifetimes: cuMemCreate makes a physical
 * allocation (charged to its device at once) and a handle to it; cuMemAddressReserve reserves a
 * virtual range; cuMemMap puts a physical allocation (or a part of it) at an address of a
 * reservation. A physical allocation lives while it has a handle reference (cuMemCreate,
 * cuMemRetainAllocationHandle; dropped by cuMemRelease) OR a mapping: the documented pattern
 * create → map → release frees the memory at the last cuMemUnmap, not at the release.
 * Physical allocations are not owned by a context (they outlive cuCtxDestroy); the process's
 * death frees them with its state slot.
 *
 * Virtual ranges come from a window above every device's allocation window, handed out upwards
 * and never reused (a 64 TiB window is never exhausted by a test). Everything under fg_cu.mu.
 *
 * Sharing (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR): cuMemExportToShareableHandle makes the
 * allocation a shared allocation of the device state (state.h; its bytes are charged once, for as
 * long as a holder lives) and hands out a file descriptor that names it (a memfd holding the
 * entry's id and nonce); cuMemImportFromShareableHandle in any process of the host takes a
 * reference and a handle of its own, with the same lifetimes as a created one. Not modelled: the
 * descriptor itself keeping the memory alive once no process holds a handle or a mapping.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_internal.h"

#define FG_VMM_VA_BASE (0xffff800000000000ULL + (32ULL << 40))
#define FG_VMM_VA_END (FG_VMM_VA_BASE + (64ULL << 40))

typedef struct phys {
    CUmemGenericAllocationHandle handle;
    uint64_t size;
    int dev;
    unsigned refs, maps;
    unsigned handle_types; /* requestedHandleTypes at creation */
    uint64_t share_id;     /* the shared allocation it is (exported or imported), 0: none */
} phys;

typedef struct range {
    CUdeviceptr va;
    uint64_t size;
    CUmemGenericAllocationHandle handle; /* mappings only */
    int access;                          /* mappings only: cuMemSetAccess was called */
} range;

typedef struct vec {
    void *v;
    size_t n, cap, elem;
} vec;

static vec physv = {NULL, 0, 0, sizeof(phys)}, resv = {NULL, 0, 0, sizeof(range)}, mapv = {NULL, 0, 0, sizeof(range)};
static CUdeviceptr va_next = FG_VMM_VA_BASE;
static CUmemGenericAllocationHandle next_handle = 0x100000;

static void *push(vec *v) {
    if (v->n == v->cap) {
        size_t ncap = v->cap ? v->cap * 2 : 32;
        void *p = realloc(v->v, ncap * v->elem);
        if (!p)
            return NULL;
        v->v = p, v->cap = ncap;
    }
    return (char *)v->v + v->elem * v->n++;
}

static void drop(vec *v, size_t i) {
    memmove((char *)v->v + i * v->elem, (char *)v->v + (i + 1) * v->elem, (v->n - i - 1) * v->elem);
    v->n--;
}

#define PHYS ((phys *)physv.v)
#define RESV ((range *)resv.v)
#define MAPS ((range *)mapv.v)

static phys *find_phys(CUmemGenericAllocationHandle h, size_t *idx) {
    for (size_t i = 0; i < physv.n; i++)
        if (PHYS[i].handle == h) {
            if (idx)
                *idx = i;
            return &PHYS[i];
        }
    return NULL;
}

/* Frees the physical memory once nothing refers to it. */
static void maybe_free(CUmemGenericAllocationHandle h) {
    size_t i;
    phys *p = find_phys(h, &i);
    if (p && p->refs == 0 && p->maps == 0) {
        if (p->share_id) {
            if (fg_state_lock(&fg_cu.st) == 0) {
                fg_state_share_drop(&fg_cu.st, p->share_id);
                fg_state_unlock(&fg_cu.st);
            }
        } else {
            fg_mem_uncharge(p->dev, p->size);
        }
        drop(&physv, i);
    }
}

CUdeviceptr fg_va_reserve(uint64_t size, uint64_t align) {
    if (align < FG_GRANULE)
        align = FG_GRANULE;
    if (align & (align - 1))
        return 0;
    CUdeviceptr p = (va_next + align - 1) & ~(align - 1);
    if (p < va_next || size > FG_VMM_VA_END - p)
        return 0;
    va_next = p + fg_granules(size);
    return p;
}

static void vmm_forget_all(void) {
    free(physv.v), free(resv.v), free(mapv.v);
    physv.v = resv.v = mapv.v = NULL;
    physv.n = physv.cap = resv.n = resv.cap = mapv.n = mapv.cap = 0;
}
static const fg_cu_observer vmm_observer = {.forget_all = vmm_forget_all};
static void __attribute__((constructor)) vmm_register(void) { fg_cu_observe(&vmm_observer, FG_CU_STAGE_ALLOCATIONS); }

static int prop_ok(const CUmemAllocationProp *prop) {
    return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
}

FG_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                                 CUmemAllocationGranularity_flags option) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!granularity || !prop_ok(prop) || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                                           option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_cu_dev_valid(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    *granularity = FG_GRANULE;
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags) {
    fg_ctx *c;
    CUresult r = fg_cu_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle || !size || !prop_ok(prop) || flags || size % FG_GRANULE)
        return CUDA_ERROR_INVALID_VALUE;
    int dev = prop->location.id;
    if (!fg_cu_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (fg_cu_lost(dev))
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    fg_alloc_delay();
    unsigned long nth = __atomic_add_fetch(&fg_cu.alloc_calls, 1, __ATOMIC_RELAXED);
    if (fg_cu.cfg.faults.fail_alloc && nth == fg_cu.cfg.faults.fail_alloc)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&fg_cu.mu);
    phys *p = push(&physv);
    if (!p) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else if ((r = fg_mem_charge(dev, size)) != CUDA_SUCCESS) {
        physv.n--;
    } else {
        *p = (phys){next_handle++, size, dev, 1, 0, (unsigned)prop->requestedHandleTypes, 0};
        *handle = p->handle;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&fg_cu.mu);
    phys *p = find_phys(handle, NULL);
    if (!p || p->refs == 0) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        p->refs--;
        maybe_free(handle);
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                       unsigned long long flags) {
    (void)addr; /* a hint; the fake never honours it, which the driver is allowed to do */
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ptr || !size || size % FG_GRANULE || flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    CUdeviceptr va = fg_va_reserve(size, alignment);
    range *rg = va ? push(&resv) : NULL;
    if (!rg) {
        r = va ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    } else {
        *rg = (range){va, size, 0, 0};
        *ptr = va;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

static int overlaps(CUdeviceptr a, uint64_t an, CUdeviceptr b, uint64_t bn) { return a < b + bn && b < a + an; }

FG_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&fg_cu.mu);
    r = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < resv.n; i++)
        if (RESV[i].va == ptr && RESV[i].size == size) {
            int mapped = 0;
            for (size_t j = 0; j < mapv.n && !mapped; j++)
                mapped = overlaps(MAPS[j].va, MAPS[j].size, ptr, size);
            if (!mapped) { /* still mapped: unmap first */
                drop(&resv, i);
                r = CUDA_SUCCESS;
            }
            break;
        }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

static int reserved_range(CUdeviceptr p, uint64_t n) {
    for (size_t i = 0; i < resv.n; i++)
        if (p >= RESV[i].va && n <= RESV[i].size && p - RESV[i].va <= RESV[i].size - n)
            return 1;
    return 0;
}

FG_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                            unsigned long long flags) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ptr || !size || flags || ptr % FG_GRANULE || size % FG_GRANULE || offset % FG_GRANULE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    phys *p = find_phys(handle, NULL);
    if (!p || p->refs == 0 || offset > p->size || size > p->size - offset || !reserved_range(ptr, size)) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (offset || size != p->size) {
        /* The documentation allows part of an allocation; the driver does not (580 on an H200:
         * CUDA_ERROR_NOT_SUPPORTED for any size but the whole allocation, own or imported). */
        r = CUDA_ERROR_NOT_SUPPORTED;
    } else {
        for (size_t j = 0; j < mapv.n && r == CUDA_SUCCESS; j++)
            if (overlaps(MAPS[j].va, MAPS[j].size, ptr, size))
                r = CUDA_ERROR_ALREADY_MAPPED;
        range *m = r == CUDA_SUCCESS ? push(&mapv) : NULL;
        if (m) {
            *m = (range){ptr, size, handle, 0};
            find_phys(handle, NULL)->maps++; /* push may have moved nothing of physv, but look again */
        } else if (r == CUDA_SUCCESS) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

/* The range must cover whole mappings; each one it covers goes, and with the last mapping of a
 * released allocation its memory. */
FG_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ptr || !size)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    int covered = 0;
    for (size_t j = 0; j < mapv.n; j++) {
        if (!overlaps(MAPS[j].va, MAPS[j].size, ptr, size))
            continue;
        if (MAPS[j].va < ptr || MAPS[j].va + MAPS[j].size > ptr + size) {
            r = CUDA_ERROR_INVALID_VALUE; /* would split a mapping */
            break;
        }
        covered = 1;
    }
    if (r == CUDA_SUCCESS && !covered)
        r = CUDA_ERROR_INVALID_VALUE;
    for (size_t j = 0; r == CUDA_SUCCESS && j < mapv.n;) {
        if (!overlaps(MAPS[j].va, MAPS[j].size, ptr, size)) {
            j++;
            continue;
        }
        CUmemGenericAllocationHandle h = MAPS[j].handle;
        drop(&mapv, j);
        phys *p = find_phys(h, NULL);
        if (p) {
            p->maps--;
            maybe_free(h);
        }
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ptr || !size || !desc || !count)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++)
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !fg_cu_dev_valid(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fg_cu.mu);
    /* Every byte of the range must be mapped. */
    uint64_t seen = 0;
    for (size_t j = 0; j < mapv.n; j++)
        if (overlaps(MAPS[j].va, MAPS[j].size, ptr, size)) {
            CUdeviceptr a = MAPS[j].va > ptr ? MAPS[j].va : ptr;
            CUdeviceptr b = MAPS[j].va + MAPS[j].size < ptr + size ? MAPS[j].va + MAPS[j].size : ptr + size;
            seen += b - a;
            MAPS[j].access = 1;
        }
    if (seen != size)
        r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr a = (CUdeviceptr)(uintptr_t)addr;
    pthread_mutex_lock(&fg_cu.mu);
    r = CUDA_ERROR_INVALID_VALUE;
    for (size_t j = 0; j < mapv.n; j++)
        if (a >= MAPS[j].va && a - MAPS[j].va < MAPS[j].size) {
            phys *p = find_phys(MAPS[j].handle, NULL);
            if (p) {
                p->refs++;
                *handle = p->handle;
                r = CUDA_SUCCESS;
            }
            break;
        }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

#define VMM_MAGIC "FGVMM001"
typedef struct vmm_wire {
    char magic[8];
    uint64_t id, nonce, size;
    uint32_t unit, pad;
} vmm_wire;

FG_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType, unsigned long long flags) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!shareableHandle || flags || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    phys *p = find_phys(handle, NULL);
    vmm_wire w = {{0}, 0, 0, 0, 0, 0};
    if (!p || p->refs == 0 || !(p->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        r = CUDA_ERROR_INVALID_VALUE; /* created without the POSIX descriptor handle type */
    } else if (fg_state_lock(&fg_cu.st) != 0) {
        r = CUDA_ERROR_UNKNOWN;
    } else {
        unsigned unit = fg_cu.dev[p->dev].unit;
        if (!p->share_id) {
            int j = fg_state_share(&fg_cu.st, unit, p->size, FG_SHARE_VMM);
            if (j >= 0)
                p->share_id = fg_cu.st.sh->share[j].id;
        }
        r = CUDA_ERROR_OUT_OF_MEMORY; /* the shared table is full */
        for (int j = 0; p->share_id && j < FG_MAX_SHARED; j++)
            if (fg_cu.st.sh->share[j].id == p->share_id) {
                w.id = p->share_id, w.nonce = fg_cu.st.sh->share[j].nonce, w.size = p->size, w.unit = unit;
                r = CUDA_SUCCESS;
            }
        fg_state_unlock(&fg_cu.st);
    }
    pthread_mutex_unlock(&fg_cu.mu);
    if (r != CUDA_SUCCESS)
        return r;
    memcpy(w.magic, VMM_MAGIC, sizeof w.magic);
    int fd = memfd_create("fakegpu-vmm", MFD_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (pwrite(fd, &w, sizeof w, 0) != (ssize_t)sizeof w) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}

FG_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                CUmemAllocationHandleType shHandleType) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    vmm_wire w;
    int fd = (int)(intptr_t)osHandle;
    if (pread(fd, &w, sizeof w, 0) != (ssize_t)sizeof w || memcmp(w.magic, VMM_MAGIC, sizeof w.magic) != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    int dev = -1;
    for (int d = 0; d < fg_cu.ndev && dev < 0; d++)
        if (fg_cu.dev[d].unit == w.unit)
            dev = d;
    if (dev < 0)
        return CUDA_ERROR_INVALID_DEVICE; /* its device is not visible to this process */
    pthread_mutex_lock(&fg_cu.mu);
    phys *mine = NULL;
    for (size_t i = 0; i < physv.n && !mine; i++)
        if (PHYS[i].share_id == w.id)
            mine = &PHYS[i];
    if (mine) {
        mine->refs++; /* already held here: one more reference on the same handle */
        *handle = mine->handle;
    } else if (fg_state_lock(&fg_cu.st) != 0) {
        r = CUDA_ERROR_UNKNOWN;
    } else {
        int held = fg_state_share_hold(&fg_cu.st, w.id, w.nonce);
        fg_state_unlock(&fg_cu.st);
        phys *p = held >= 0 ? push(&physv) : NULL;
        if (held < 0) {
            r = CUDA_ERROR_INVALID_HANDLE; /* released by its last holder */
        } else if (!p) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            *p = (phys){next_handle++, w.size, dev, 1, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, w.id};
            *handle = p->handle;
        }
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return r;
}

FG_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle) {
    CUresult r = fg_cu_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg_cu.mu);
    phys *p = find_phys(handle, NULL);
    if (p) {
        memset(prop, 0, sizeof *prop);
        prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop->requestedHandleTypes = (CUmemAllocationHandleType)p->handle_types;
        prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop->location.id = p->dev;
    }
    pthread_mutex_unlock(&fg_cu.mu);
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
