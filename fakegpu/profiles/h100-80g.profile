# NVIDIA H100 80GB HBM3 (SXM5).
driver_version = 550.90.07
cuda_version = 12040
context_mib = 500          # Hopper contexts are larger (an H200 measured 518 MiB)
launch_ns = 10000

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
