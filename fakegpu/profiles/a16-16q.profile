# NVIDIA A16-16Q: one 16 GiB vGPU slice of an A16 board, the card of the config-file delivery
# design's reproduction (driver 550.90.07, CUDA 12.4).
driver_version = 550.90.07
cuda_version = 12040
context_mib = 300          # what one CUDA context costs on the device
launch_ns = 10000          # simulated duration of one kernel launch

device = 0
name = NVIDIA A16-16Q
uuid = GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50
memory_mib = 16384
pci_bus_id = 00000000:00:05.0
pci_device_id = 0x25B610DE
minor = 0
architecture = ampere
compute_capability = 8.6
sm_count = 10
