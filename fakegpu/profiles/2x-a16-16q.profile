# Two NVIDIA A16-16Q vGPUs on one node: for pods and limits that span devices.
driver_version = 550.90.07
cuda_version = 12040
context_mib = 300
launch_ns = 10000

device = 0
name = NVIDIA A16-16Q
uuid = GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50
memory_mib = 16384
pci_bus_id = 00000000:00:05.0
pci_device_id = 0x25B610DE
architecture = ampere
compute_capability = 8.6
sm_count = 10

device = 1
name = NVIDIA A16-16Q
uuid = GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f51
memory_mib = 16384
pci_bus_id = 00000000:00:06.0
pci_device_id = 0x25B610DE
architecture = ampere
compute_capability = 8.6
sm_count = 10
