# NVIDIA H100 80GB HBM3 (SXM5).
driver_version = 550.90.07
cuda_version = 12040
context_mib = 500          # Hopper contexts are larger (an H200 measured 518 MiB)
launch_ns = 10000
# The engine as the project's H100 showed it under vgpu-scheduler (docs/benchmarks.md, "Where the
# time goes"): dense GEMMs clock about 13 % over their full-load clock while the card is partly
# idle, and about 0.3 of that gain is work (30 % + 50 % charged by the whole clock did 0.270 /
# 0.460). Estimates from those shares until the GPU tier's fidelity run measures the card.
power_boost = 113
power_work_pct = 30
sm_clock_mhz = 1755

device = 0
name = NVIDIA H100 80GB HBM3
uuid = GPU-d1000000-8080-4b00-9000-00000000d100
memory_mib = 81559
pci_bus_id = 00000000:18:00.0
pci_device_id = 0x233010DE
architecture = hopper
compute_capability = 9.0
sm_count = 132
bar1_mib = 131072
