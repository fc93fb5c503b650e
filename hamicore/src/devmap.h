/* CUDA ordinal -> physical GPU: matched by UUID, never assumed equal (CUDA_VISIBLE_DEVICES and
 * CUDA_DEVICE_ORDER reorder CUDA's devices, NVML keeps PCI order). devmap.c. */
#ifndef LB_DEVMAP_H
#define LB_DEVMAP_H

#include <stdint.h>

/* The GPU's index in the region and the limits file (its NVML index); -1 when the driver cannot
 * tell which GPU ordinal ord is (its allocations are then refused). A MIG instance: its GPU's. */
int lb_phys_index(int ord);
/* The NVML index of CUDA ordinal dev; dev itself while CUDA or NVML cannot tell (the limiter). */
int lb_nvml_index(int dev);
/* NVML's spelling of a UUID's 16 bytes, with prefix "GPU-" or "MIG-"; and back (0, or -1). */
void lb_uuid_str(const char *bytes, const char *prefix, char out[48]);
int lb_uuid_bytes(const char *s, uint8_t out[16]);

#endif
