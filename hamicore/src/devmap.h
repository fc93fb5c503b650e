/* CUDA ordinal <-> NVML index: matched by UUID, never assumed equal (CUDA_VISIBLE_DEVICES and
 * CUDA_DEVICE_ORDER reorder CUDA's devices, NVML keeps PCI order). nvml.c. */
#ifndef LB_DEVMAP_H
#define LB_DEVMAP_H

/* The NVML index of CUDA ordinal dev; dev itself while CUDA or NVML cannot tell. */
int lb_nvml_index(int dev);

#endif
