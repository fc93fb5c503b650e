/* Reordered devices: run with CUDA_VISIBLE_DEVICES=1,0 on a machine with 2 GPUs (so CUDA
 * ordinal 0 is NVML index 1, the second GPU).
 * native:  2000 MiB on ordinal 0: NVML index 1 (the same GPU, matched by UUID) shows >= 2000 MiB
 *          used, index 0 less.
 * limited: the limits are per physical GPU in NVML's order (CUDA_DEVICE_MEMORY_LIMIT_0 =
 *          PATH_LIMIT_MIB for the first, CUDA_DEVICE_MEMORY_LIMIT_1 = PATH_LIMIT1_MIB, default
 *          1000, for the second), whatever the process calls them: on ordinal 0 (the second GPU)
 *          2000 MiB are refused and 800 MiB granted, cuMemGetInfo and NVML index 1 report its
 *          1000 MiB; on ordinal 1 (the first GPU) 2000 MiB are granted, NVML index 0 shows them. */
#include "path.h"
#include "limitbed/nvml_abi.h"

static void nvml_mem(unsigned i, nvmlMemory_t *m)
{
    nvmlDevice_t h;
    EXPECT(nvmlDeviceGetHandleByIndex_v2(i, &h) == NVML_SUCCESS && nvmlDeviceGetMemoryInfo(h, m) == NVML_SUCCESS,
           "NVML memory info of index %u", i);
}

int main(void)
{
    path_begin();
    int n = 0;
    unsigned nn = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS || nvmlInit_v2() != NVML_SUCCESS ||
        nvmlDeviceGetCount_v2(&nn) != NVML_SUCCESS || n < 2 || nn < 2) {
        printf("SKIP device-order: needs 2 GPUs (CUDA %d, NVML %u)\n", n, nn);
        return 77;
    }
    const char *l1 = getenv("PATH_LIMIT1_MIB");
    unsigned long long limit1 = l1 ? strtoull(l1, NULL, 10) : 1000;
    CUcontext c0 = path_ctx(), c1;
    CUuuid u;
    CU(cuDeviceGetUuid(&u, 0));
    char want[96];
    snprintf(want, sizeof want, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             (unsigned char)u.bytes[0], (unsigned char)u.bytes[1], (unsigned char)u.bytes[2], (unsigned char)u.bytes[3],
             (unsigned char)u.bytes[4], (unsigned char)u.bytes[5], (unsigned char)u.bytes[6], (unsigned char)u.bytes[7],
             (unsigned char)u.bytes[8], (unsigned char)u.bytes[9], (unsigned char)u.bytes[10], (unsigned char)u.bytes[11],
             (unsigned char)u.bytes[12], (unsigned char)u.bytes[13], (unsigned char)u.bytes[14], (unsigned char)u.bytes[15]);
    int same = -1;
    for (unsigned i = 0; i < nn; i++) {
        nvmlDevice_t h;
        char uuid[96] = "";
        if (nvmlDeviceGetHandleByIndex_v2(i, &h) == NVML_SUCCESS && nvmlDeviceGetUUID(h, uuid, sizeof uuid) == NVML_SUCCESS &&
            strcmp(uuid, want) == 0)
            same = (int)i;
    }
    EXPECT(same == 1, "CUDA ordinal 0 is NVML index %d (%s)", same, want);
    nvmlMemory_t m0, m1;
    CUdeviceptr p, q;
    if (!path_limited) {
        CU(cuMemAlloc(&p, 2000 * MIB));
        nvml_mem(0, &m0), nvml_mem(1, &m1);
        EXPECT(m1.used >= 2000 * MIB && m0.used < 2000 * MIB, "NVML used: index 1 %llu MiB, index 0 %llu MiB",
               m1.used / MIB, m0.used / MIB);
        CU(cuMemFree(p));
        return path_end("device-order");
    }
    EXPECT(cuMemAlloc(&p, 2000 * MIB) == CUDA_ERROR_OUT_OF_MEMORY,
           "2000 MiB on ordinal 0 (the second GPU, limit %llu MiB) refused", limit1);
    CU(cuMemAlloc(&p, 800 * MIB));
    size_t f, t;
    CU(cuMemGetInfo(&f, &t));
    EXPECT(t == limit1 * MIB, "cuMemGetInfo on ordinal 0: total %llu MiB", (unsigned long long)(t / MIB));
    nvml_mem(0, &m0), nvml_mem(1, &m1);
    EXPECT(m1.total == limit1 * MIB && m1.used == 800 * MIB, "NVML index 1: total %llu used %llu MiB", m1.total / MIB,
           m1.used / MIB);
    EXPECT(m0.total == path_limit_mib * MIB && m0.used == 0, "NVML index 0: total %llu used %llu MiB", m0.total / MIB,
           m0.used / MIB);
    CU(cuDevicePrimaryCtxRetain(&c1, 1));
    CU(cuCtxSetCurrent(c1));
    CU(cuMemAlloc(&q, 2000 * MIB));
    nvml_mem(0, &m0);
    EXPECT(m0.used == 2000 * MIB, "2000 MiB on ordinal 1 (the first GPU): NVML index 0 used %llu MiB", m0.used / MIB);
    CU(cuMemFree(q));
    CU(cuCtxSetCurrent(c0));
    CU(cuMemFree(p));
    return path_end("device-order");
}
