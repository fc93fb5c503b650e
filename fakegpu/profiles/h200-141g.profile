# NVIDIA H200 (SXM, 141 GB HBM3e), the project's GPU machine: driver 580.159.04, CUDA 13.0
# (docs/benchmarks.md). memory_mib is what its NVML reports (143771 MiB), context_mib what a CUDA
# context held there (518 MiB, docs/benchmarks.md, drivertruth); the engine's keys from the
# 2026-12 runs there. To be confirmed by the first fidelity run on the card (./gpu-check
# fidelity): pci_device_id, bar1_mib and launch_ns are guesses, not yet measured on the H200.
driver_version = 580.159.04
cuda_version = 13000
context_mib = 518          # measured: drivertruth on the H200 (1518 MiB for 1000 MiB allocated)
launch_ns = 10000          # to be confirmed (fidelity: empty-kernel round trip)
timeslice_us = 2400        # measured: the timeslice section (211 µs alone, 2584 µs beside a flood)
nvml_samples = periodic    # measured: one per-process sample a second, in 20 % steps (docs/benchmarks.md)
power_boost = 130          # measured: GEMMs at 1521 MHz at full load, 1980 MHz partly idle
power_work_pct = 61        # measured: at 30 % duty the clock +28 %, the work per busy second +17 %
sm_clock_mhz = 1521        # measured: vgpu-scheduler's full-load clock under PyTorch GEMMs

device = 0
name = NVIDIA H200
uuid = GPU-d2000000-8d8d-4b00-9000-00000000d200
memory_mib = 143771
pci_bus_id = 00000000:18:00.0
pci_device_id = 0x233510DE # to be confirmed
architecture = hopper
compute_capability = 9.0
sm_count = 132
bar1_mib = 262144          # to be confirmed
