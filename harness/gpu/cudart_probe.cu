// cudart_probe: the CUDA *runtime* view of a limit, for the real-GPU job (built there with nvcc).
//
// The runtime reaches the driver through cuGetProcAddress, not through exported symbols, so this
// is the program that proves libvgpu.so is not bypassed by ordinary CUDA applications.
//
//   cudart_probe alloc MIB      cudaMalloc MIB MiB; one JSON line with the result and cudaMemGetInfo
//   cudart_probe bench N        medians of N cudaMalloc+cudaFree (1 MiB) pairs and N empty launches
//   cudart_probe spin SECONDS   launch ~1 ms busy kernels (all SMs) for SECONDS; print how many ran,
//                               so a compute limit shows as a ratio against an unlimited run
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

__global__ void empty_kernel() {}

// Busy-waits about `cycles` SM clock cycles, so each launch keeps the GPU busy for a known time.
__global__ void spin_kernel(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

static double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "alloc") != 0 && strcmp(argv[1], "bench") != 0 &&
                      strcmp(argv[1], "spin") != 0)) {
        fprintf(stderr, "usage: cudart_probe alloc MIB | bench N | spin SECONDS\n");
        return 2;
    }
    double t0 = now_us();
    cudaError_t err = cudaFree(0);  // creates the primary context
    double init_us = now_us() - t0;
    if (err != cudaSuccess) {
        printf("{\"error\":\"%s\",\"stage\":\"init\"}\n", cudaGetErrorName(err));
        return 1;
    }
    if (strcmp(argv[1], "alloc") == 0) {
        size_t mib = strtoull(argv[2], nullptr, 10);
        void *p = nullptr;
        err = cudaMalloc(&p, mib << 20);
        size_t free_b = 0, total_b = 0;
        cudaError_t ierr = cudaMemGetInfo(&free_b, &total_b);
        printf("{\"api\":\"cudart\",\"requested_mib\":%zu,\"granted_mib\":%zu,\"error\":%s%s%s,"
               "\"total_mib\":%zu,\"free_mib\":%zu,\"meminfo_error\":\"%s\",\"init_us\":%.0f}\n",
               mib, err == cudaSuccess ? mib : 0, err == cudaSuccess ? "" : "\"",
               err == cudaSuccess ? "null" : cudaGetErrorName(err), err == cudaSuccess ? "" : "\"",
               total_b >> 20, free_b >> 20, cudaGetErrorName(ierr), init_us);
        if (p) cudaFree(p);
        return 0;
    }
    if (strcmp(argv[1], "spin") == 0) {
        double seconds = atof(argv[2]);
        int sms = 0, khz = 0;
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
        long long cycles = (long long)khz;  // ~1 ms at the base clock
        long launches = 0;
        double start = now_us(), end = start + seconds * 1e6;
        while (now_us() < end) {
            spin_kernel<<<sms, 32>>>(cycles);
            launches++;
            if (launches % 8 == 0) cudaDeviceSynchronize();
        }
        cudaDeviceSynchronize();
        double took = (now_us() - start) / 1e6;
        printf("{\"mode\":\"spin\",\"seconds\":%.2f,\"launches\":%ld,\"launches_per_s\":%.1f,\"error\":\"%s\"}\n",
               took, launches, launches / took, cudaGetErrorName(cudaGetLastError()));
        return 0;
    }
    int n = atoi(argv[2]);
    std::vector<double> alloc, launch;
    for (int i = 0; i < n; i++) {
        void *p = nullptr;
        double a = now_us();
        if (cudaMalloc(&p, 1 << 20) != cudaSuccess || cudaFree(p) != cudaSuccess) {
            printf("{\"error\":\"alloc failed\"}\n");
            return 1;
        }
        alloc.push_back(now_us() - a);
    }
    empty_kernel<<<1, 1>>>();
    cudaDeviceSynchronize();
    for (int i = 0; i < n; i++) {
        double a = now_us();
        empty_kernel<<<1, 1>>>();
        launch.push_back(now_us() - a);
        if (i % 64 == 63) cudaDeviceSynchronize();
    }
    cudaDeviceSynchronize();
    printf("{\"init_us\":%.0f,\"alloc_free_1mib_us\":%.2f,\"launch_us\":%.2f,\"n\":%d}\n", init_us,
           median(alloc), median(launch), n);
    return 0;
}
