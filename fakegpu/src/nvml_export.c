/*
 * nvmlInternalGetExportTable: the real nvidia-smi refuses a libnvidia-ml.so.1 that lacks it
 * ("Mismatch in versions between nvidia-smi and NVML") and reaches part of what it shows only
 * through it. One table is asked for, by a GUID; its slots are functions. What each slot means was
 * found by tracing which slots Debian's nvidia-smi 535.309.01 calls on each of its screens, with
 * which arguments, and what it then prints (FAKEGPU_NVML_TRACE=1 logs every call; NVIDIA's own
 * mock NVML reports the same GUID, slot numbers and entry layout for 580):
 *   81       the handle of a device by index: (unsigned index, nvmlDevice_t *out, ...)
 *   26       nvidia-smi's own messages ("nvidia-smi %s: %s", ...): taken, not printed
 *   213-215  the processes of a device (a GPU, or a MIG instance in MIG mode): compute, graphics
 *            and MPS compute; (nvmlDevice_t, unsigned *count: in the room, out how many,
 *            smi_process *array)
 * Every other slot answers NVML_ERROR_NOT_SUPPORTED, which nvidia-smi prints as N/A: it never
 * shows a value the profile and the shared state did not give.
 */
#include <stdint.h>
#include <string.h>

#include "nvml_internal.h"

FG_EXPORT nvmlReturn_t nvmlInternalGetExportTable(const void **ppExportTable, const unsigned char *pExportTableId);

/* 6c3efec4-8fc9-4e6c-a327-ee696e12f7c4, in memory as a little-endian {u32, u16, u16, u8[8]} */
static const unsigned char smi_table_id[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                               0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};

enum { SLOT_MESSAGE = 26, SLOT_HANDLE_BY_INDEX = 81, SLOT_COMPUTE = 213, SLOT_GRAPHICS = 214, SLOT_MPS = 215 };

/* One process as slots 213-215 return it: the numbers of nvmlProcessDetail_v1_t, then the name
 * inline (nvidia-smi's default screen leaves out a process without one). 4128 bytes apart. */
typedef struct smi_process {
    uint32_t pid;
    uint32_t pad;
    uint64_t used_bytes;
    uint32_t gpu_instance_id, compute_instance_id; /* 0xFFFFFFFF outside MIG */
    uint64_t protected_bytes;
    char name[4096];
} smi_process;
_Static_assert(sizeof(smi_process) == 4128, "nvidia-smi reads the entries 4128 bytes apart");

#define MAX_PROCESSES 256 /* what the process list itself returns at most */

static nvmlReturn_t processes(void *device, void *count_p, void *array, unsigned slot) {
    unsigned *count = count_p;
    if (!fg_nv_handle((nvmlDevice_t)device) || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (slot != SLOT_COMPUTE) { /* no graphics, no MPS on the fake */
        *count = 0;
        return NVML_SUCCESS;
    }
    /* The public list: the same processes, PIDs and bytes as nvmlDeviceGetComputeRunningProcesses. */
    nvmlProcessInfo_t info[MAX_PROCESSES];
    unsigned n = MAX_PROCESSES;
    nvmlReturn_t r = nvmlDeviceGetComputeRunningProcesses_v3((nvmlDevice_t)device, &n, info);
    if (r != NVML_SUCCESS)
        return r;
    unsigned room = *count;
    *count = n;
    if (room < n)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    if (n && !array)
        return NVML_ERROR_INVALID_ARGUMENT;
    smi_process *e = array;
    for (unsigned i = 0; i < n; i++) {
        memset(&e[i], 0, sizeof e[i]);
        e[i].pid = info[i].pid, e[i].used_bytes = info[i].usedGpuMemory;
        e[i].gpu_instance_id = info[i].gpuInstanceId, e[i].compute_instance_id = info[i].computeInstanceId;
        if (nvmlSystemGetProcessName(info[i].pid, e[i].name, sizeof e[i].name) != NVML_SUCCESS)
            e[i].name[0] = 0; /* not visible from here (another PID namespace) */
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t dispatch(unsigned slot, void *a0, void *a1, void *a2) {
    if (fg_nv.cfg.trace_export)
        fg_log("nvidia-smi export table: slot %u (%p, %p, %p)", slot, a0, a1, a2);
    switch (slot) {
    case SLOT_MESSAGE:
        return NVML_SUCCESS;
    case SLOT_HANDLE_BY_INDEX:
        return nvmlDeviceGetHandleByIndex_v2((unsigned)(uintptr_t)a0, (nvmlDevice_t *)a1);
    case SLOT_COMPUTE:
    case SLOT_GRAPHICS:
    case SLOT_MPS:
        return processes(a0, a1, a2, slot);
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

/* One function per slot, so that a call says which slot it came through. Each takes the most
 * arguments any known slot has; a caller that passes fewer leaves the rest unread. */
#define SLOT_FN(n)                                                                                                     \
    static nvmlReturn_t slot_##n(void *a0, void *a1, void *a2) { return dispatch(n, a0, a1, a2); }
#define TEN(M, t) M(t##0) M(t##1) M(t##2) M(t##3) M(t##4) M(t##5) M(t##6) M(t##7) M(t##8) M(t##9)
#define NSLOTS 260 /* word 0 and slots 1..259: beyond the highest nvidia-smi 535 calls (243) */
#define SLOTS(M)                                                                                                       \
    M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) TEN(M, 1) TEN(M, 2) TEN(M, 3) TEN(M, 4) TEN(M, 5) TEN(M, 6) TEN(M, 7) TEN(M, 8) TEN(M, 9) TEN(M, 10)   \
        TEN(M, 11) TEN(M, 12) TEN(M, 13) TEN(M, 14) TEN(M, 15) TEN(M, 16) TEN(M, 17) TEN(M, 18) TEN(M, 19)         \
            TEN(M, 20) TEN(M, 21) TEN(M, 22) TEN(M, 23) TEN(M, 24) TEN(M, 25)
SLOTS(SLOT_FN)
#define SLOT_ADDR(n) (const void *)slot_##n,
/* Word 0 is the table's size in bytes (nvidia-smi checks that the slots it uses lie within). */
static const void *const smi_table[NSLOTS] = {(const void *)(NSLOTS * sizeof(void *)), SLOTS(SLOT_ADDR)};

FG_EXPORT nvmlReturn_t nvmlInternalGetExportTable(const void **ppExportTable, const unsigned char *pExportTableId) {
    NV_ENTER();
    if (!ppExportTable || !pExportTableId)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memcmp(pExportTableId, smi_table_id, sizeof smi_table_id) != 0) {
        if (fg_nv.cfg.trace_export)
            fg_log("nvidia-smi export table: unknown table asked for; answered NVML_ERROR_NOT_SUPPORTED");
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *ppExportTable = smi_table;
    return NVML_SUCCESS;
}
