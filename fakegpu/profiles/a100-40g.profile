# NVIDIA A100-SXM4-40GB, MIG capable but in whole-GPU mode.
driver_version = 550.90.07
cuda_version = 12040
context_mib = 300
launch_ns = 10000

device = 0
name = NVIDIA A100-SXM4-40GB
uuid = GPU-a1000000-4040-4a00-8000-00000000a100
memory_mib = 40960
pci_bus_id = 00000000:07:00.0
pci_device_id = 0x20B010DE
architecture = ampere
compute_capability = 8.0
sm_count = 108
bar1_mib = 65536
mig_mode = disabled
