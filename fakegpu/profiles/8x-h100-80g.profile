# An 8-GPU node: eight NVIDIA H100 80GB HBM3 (SXM5), as an HGX H100 board has them.
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

device = 1
name = NVIDIA H100 80GB HBM3
uuid = GPU-d1000000-8080-4b00-9000-00000000d101
memory_mib = 81559
pci_bus_id = 00000000:28:00.0
pci_device_id = 0x233010DE
architecture = hopper
compute_capability = 9.0
sm_count = 132

device = 2
name = NVIDIA H100 80GB HBM3
uuid = GPU-d1000000-8080-4b00-9000-00000000d102
memory_mib = 81559
pci_bus_id = 00000000:38:00.0
pci_device_id = 0x233010DE
architecture = hopper
compute_capability = 9.0
sm_count = 132

device = 3
name = NVIDIA H100 80GB HBM3
uuid = GPU-d1000000-8080-4b00-9000-00000000d103
memory_mib = 81559
pci_bus_id = 00000000:48:00.0
pci_device_id = 0x233010DE
architecture = hopper
compute_capability = 9.0
sm_count = 132

device = 4
name = NVIDIA H100 80GB HBM3
uuid = GPU-d1000000-8080-4b00-9000-00000000d104
memory_mib = 81559
pci_bus_id = 00000000:58:00.0
pci_device_id = 0x233010DE
architecture = hopper
compute_capability = 9.0
sm_count = 132

device = 5
name = NVIDIA H100 80GB HBM3
uuid = GPU-d1000000-8080-4b00-9000-00000000d105
memory_mib = 81559
pci_bus_id = 00000000:68:00.0
pci_device_id = 0x233010DE
architecture = hopper
compute_capability = 9.0
sm_count = 132

device = 6
name = NVIDIA H100 80GB HBM3
uuid = GPU-d1000000-8080-4b00-9000-00000000d106
memory_mib = 81559
pci_bus_id = 00000000:78:00.0
pci_device_id = 0x233010DE
architecture = hopper
compute_capability = 9.0
sm_count = 132

device = 7
name = NVIDIA H100 80GB HBM3
uuid = GPU-d1000000-8080-4b00-9000-00000000d107
memory_mib = 81559
pci_bus_id = 00000000:88:00.0
pci_device_id = 0x233010DE
architecture = hopper
compute_capability = 9.0
sm_count = 132
