/* Reordered devices: run with CUDA_VISIBLE_DEVICES=1,0 on a machine with 2 GPUs (so CUDA
 * ordinal 0 is NVML index 1). 2000 MiB are allocated on CUDA ordinal 0.
 * native:  NVML index 1 (the same GPU, matched by UUID) shows >= 2000 MiB used, index 0 less.
 * limited: NVML index 1 shows total = the limit and used = 2000 MiB; index 0 is not limited
 *          (its real total); cuMemGetInfo on ordinal 0 reports the limit. */
#include "path.h"
#include "limitbed/nvml_abi.h"

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
    path_ctx();
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
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 2000 * MIB));
    nvmlDevice_t h0, h1;
    nvmlMemory_t m0, m1;
    EXPECT(!(nvmlDeviceGetHandleByIndex_v2(0, &h0) != NVML_SUCCESS || nvmlDeviceGetHandleByIndex_v2(1, &h1) != NVML_SUCCESS ||
       nvmlDeviceGetMemoryInfo(h0, &m0) != NVML_SUCCESS || nvmlDeviceGetMemoryInfo(h1, &m1) != NVML_SUCCESS), "NVML memory info of both");
    if (path_limited) {
        EXPECT(m1.total == path_limit_mib * MIB && m1.used == 2000 * MIB, "NVML index 1: total %llu used %llu MiB",
               m1.total / MIB, m1.used / MIB);
        EXPECT(m0.total > path_limit_mib * MIB, "NVML index 0 not limited: total %llu MiB", m0.total / MIB);
        size_t f, t;
        CU(cuMemGetInfo(&f, &t));
        EXPECT(t == path_limit_mib * MIB, "cuMemGetInfo on ordinal 0: total %llu MiB", (unsigned long long)(t / MIB));
    } else {
        EXPECT(m1.used >= 2000 * MIB && m0.used < 2000 * MIB, "NVML used: index 1 %llu MiB, index 0 %llu MiB",
               m1.used / MIB, m0.used / MIB);
    }
    CU(cuMemFree(p));
    return path_end("device-order");
}
