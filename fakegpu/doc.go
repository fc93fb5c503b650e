// Package fakegpu holds the Go tests of fakegpu, the fake NVIDIA driver (libcuda.so.1 and
// libnvidia-ml.so.1, written in C) that lets limitbed run without a GPU. The tests build the
// libraries and tools with internal/cbuild and drive them as users do: go-nvml in process, and
// cudaprobe/gpuinfo as separate processes sharing one device state. See docs/fakegpu.md.
package fakegpu
