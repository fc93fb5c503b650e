# NVIDIA A100-SXM4-40GB in MIG mode with three instances: two 1g.5gb and one 2g.10gb.
# Each instance is its own CUDA device and its own memory; NVML lists them under the GPU.
driver_version = 550.90.07
cuda_version = 12040
context_mib = 300
launch_ns = 10000

device = 0
name = NVIDIA A100-SXM4-40GB
uuid = GPU-a1000000-4040-4a00-8000-00000000a101
memory_mib = 40960
pci_bus_id = 00000000:07:00.0
pci_device_id = 0x20B010DE
architecture = ampere
compute_capability = 8.0
sm_count = 108
bar1_mib = 65536
mig_mode = enabled

mig = 0
mig_profile = 1g.5gb
mig_uuid = MIG-5b1c0d2e-1111-5a3b-9c4d-0e1f2a3b4c01
mig_memory_mib = 4864
mig_gpu_instance_id = 7
mig_compute_instance_id = 0
mig_sm_count = 14

mig = 1
mig_profile = 1g.5gb
mig_uuid = MIG-5b1c0d2e-2222-5a3b-9c4d-0e1f2a3b4c02
mig_memory_mib = 4864
mig_gpu_instance_id = 8
mig_compute_instance_id = 0
mig_sm_count = 14

mig = 2
mig_profile = 2g.10gb
mig_uuid = MIG-5b1c0d2e-3333-5a3b-9c4d-0e1f2a3b4c03
mig_memory_mib = 9856
mig_gpu_instance_id = 3
mig_compute_instance_id = 0
mig_sm_count = 28
mig_decoders = 1
