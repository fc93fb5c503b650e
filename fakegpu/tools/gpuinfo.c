/*
 * gpuinfo: an nvidia-smi-like view through NVML (driver and CUDA versions; per GPU its name,
 * UUID, memory, utilisation, MIG instances and processes). --json prints the same as one JSON
 * object. Built only against limitbed's abi headers, so it runs on the real driver too.
 * Exit status: 0, 1 when NVML cannot be initialised, 2 on a usage error.
 */
#include <stdio.h>
#include <string.h>

#include <limitbed/nvml_abi.h>

#define MIB (1024ULL * 1024ULL)
#define MAXP 256

static int json;

static void jstr(const char *s) {
    putchar('"');
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s >= 0x20)
            putchar(*s);
    putchar('"');
}

static void memory(nvmlDevice_t d, unsigned long long *used, unsigned long long *total) {
    nvmlMemory_t m;
    *used = *total = 0;
    if (nvmlDeviceGetMemoryInfo(d, &m) == NVML_SUCCESS)
        *used = m.used / MIB, *total = m.total / MIB;
}

static void processes(nvmlDevice_t d, unsigned idx, int *first) {
    nvmlProcessInfo_t p[MAXP];
    unsigned n = MAXP;
    if (nvmlDeviceGetComputeRunningProcesses(d, &n, p) != NVML_SUCCESS)
        n = 0;
    nvmlProcessUtilizationSample_t u[MAXP];
    unsigned nu = MAXP;
    if (nvmlDeviceGetProcessUtilization(d, u, &nu, 0) != NVML_SUCCESS)
        nu = 0;
    for (unsigned i = 0; i < n; i++) {
        int sm = -1;
        for (unsigned k = 0; k < nu; k++)
            if (u[k].pid == p[i].pid)
                sm = (int)u[k].smUtil;
        int mig = p[i].gpuInstanceId != 0xFFFFFFFFu;
        if (json) {
            printf("%s{\"pid\":%u,\"used_mib\":%llu", *first ? "" : ",", p[i].pid, p[i].usedGpuMemory / MIB);
            if (mig)
                printf(",\"gi\":%u,\"ci\":%u", p[i].gpuInstanceId, p[i].computeInstanceId);
            if (sm >= 0)
                printf(",\"sm_util\":%d", sm);
            printf("}");
        } else {
            char gi[12] = "-", ci[12] = "-";
            if (mig)
                snprintf(gi, sizeof gi, "%u", p[i].gpuInstanceId), snprintf(ci, sizeof ci, "%u", p[i].computeInstanceId);
            printf("  %-4u %-4s %-4s %-10u %8lluMiB\n", idx, gi, ci, p[i].pid, p[i].usedGpuMemory / MIB);
        }
        *first = 0;
    }
}

/* The MIG instances of a GPU in MIG mode. */
static void migs(nvmlDevice_t d, int mig) {
    unsigned max = 0;
    if (mig)
        nvmlDeviceGetMaxMigDeviceCount(d, &max);
    int firstm = 1;
    for (unsigned m = 0; m < max; m++) {
        nvmlDevice_t md;
        if (nvmlDeviceGetMigDeviceHandleByIndex(d, m, &md) != NVML_SUCCESS)
            continue;
        char mname[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "", muuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
        unsigned gi = 0, ci = 0;
        unsigned long long mu, mt;
        nvmlDeviceGetName(md, mname, sizeof mname);
        nvmlDeviceGetUUID(md, muuid, sizeof muuid);
        nvmlDeviceGetGpuInstanceId(md, &gi);
        nvmlDeviceGetComputeInstanceId(md, &ci);
        memory(md, &mu, &mt);
        if (json) {
            printf("%s{\"index\":%u,\"name\":", firstm ? "" : ",", m);
            jstr(mname);
            printf(",\"uuid\":");
            jstr(muuid);
            printf(",\"gi\":%u,\"ci\":%u,\"memory_used_mib\":%llu,\"memory_total_mib\":%llu}", gi, ci, mu, mt);
        } else {
            printf("     MIG %-2u GI %-2u CI %-2u %-40s %-42s %lluMiB / %lluMiB\n", m, gi, ci, mname, muuid, mu, mt);
        }
        firstm = 0;
    }
}

/* One GPU: its line (or JSON object), its MIG instances and its processes. */
static void device(unsigned i, nvmlDevice_t d) {
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "", uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
    nvmlDeviceGetName(d, name, sizeof name);
    nvmlDeviceGetUUID(d, uuid, sizeof uuid);
    unsigned long long used, total;
    memory(d, &used, &total);
    nvmlUtilization_t u;
    nvmlReturn_t ur = nvmlDeviceGetUtilizationRates(d, &u);
    unsigned cur = 0, pend = 0;
    int mig = nvmlDeviceGetMigMode(d, &cur, &pend) == NVML_SUCCESS && cur == NVML_DEVICE_MIG_ENABLE;
    nvmlReturn_t lost = nvmlDeviceGetMemoryInfo(d, &(nvmlMemory_t){0, 0, 0});
    if (json) {
        printf("%s{\"index\":%u,\"name\":", i ? "," : "", i);
        jstr(name);
        printf(",\"uuid\":");
        jstr(uuid);
        printf(",\"memory_used_mib\":%llu,\"memory_total_mib\":%llu", used, total);
        if (ur == NVML_SUCCESS)
            printf(",\"utilization_gpu\":%u", u.gpu);
        else
            printf(",\"utilization_gpu\":null");
        unsigned mhz;
        if (nvmlDeviceGetClockInfo(d, NVML_CLOCK_SM, &mhz) == NVML_SUCCESS)
            printf(",\"sm_clock_mhz\":%u", mhz);
        if (lost != NVML_SUCCESS) {
            printf(",\"error\":");
            jstr(nvmlErrorString(lost));
        }
        printf(",\"mig_enabled\":%s,\"mig\":[", mig ? "true" : "false");
    } else {
        char util[16] = "N/A";
        if (ur == NVML_SUCCESS)
            snprintf(util, sizeof util, "%u%%", u.gpu);
        char mem[40];
        snprintf(mem, sizeof mem, "%lluMiB / %lluMiB", used, total);
        printf("%-4u %-28s %-42s %-22s %s%s%s\n", i, name, uuid, mem, util, lost != NVML_SUCCESS ? "  " : "",
               lost != NVML_SUCCESS ? nvmlErrorString(lost) : "");
    }
    migs(d, mig);
    if (json)
        printf("],\"processes\":[");
    int firstp = 1;
    if (!json)
        printf("  Processes:%s\n", "");
    processes(d, i, &firstp);
    if (json)
        printf("]}");
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else {
            fprintf(stderr, "usage: gpuinfo [--json]\n");
            return 2;
        }
    }
    nvmlReturn_t r = nvmlInit();
    if (r != NVML_SUCCESS) {
        fprintf(stderr, "gpuinfo: nvmlInit: %s\n", nvmlErrorString(r));
        return 1;
    }
    char drv[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "";
    int cuda = 0;
    unsigned n = 0;
    nvmlSystemGetDriverVersion(drv, sizeof drv);
    nvmlSystemGetCudaDriverVersion(&cuda);
    if ((r = nvmlDeviceGetCount(&n)) != NVML_SUCCESS) {
        fprintf(stderr, "gpuinfo: nvmlDeviceGetCount: %s\n", nvmlErrorString(r));
        nvmlShutdown();
        return 1;
    }
    if (json) {
        printf("{\"driver_version\":");
        jstr(drv);
        printf(",\"cuda_version\":%d,\"devices\":[", cuda);
    } else {
        printf("Driver Version: %s    CUDA Version: %d.%d\n", drv, cuda / 1000, cuda % 1000 / 10);
        printf("%-4s %-28s %-42s %-22s %s\n", "GPU", "Name", "UUID", "Memory-Usage", "Util");
    }
    for (unsigned i = 0; i < n; i++) {
        nvmlDevice_t d;
        if ((r = nvmlDeviceGetHandleByIndex(i, &d)) != NVML_SUCCESS) {
            fprintf(stderr, "gpuinfo: device %u: %s\n", i, nvmlErrorString(r));
            continue;
        }
        device(i, d);
    }
    if (json)
        printf("]}\n");
    nvmlShutdown();
    return 0;
}
