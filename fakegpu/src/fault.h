/*
 * Fault injection. Each fault is set by a profile key or, overriding it, by an environment
 * variable of the same meaning (docs/fakegpu.md):
 *   FAKEGPU_FAIL_ALLOC=N       the Nth device allocation of this process fails with OUT_OF_MEMORY
 *   FAKEGPU_NVML_ERROR=F:E     NVML function F returns error E (name like NVML_ERROR_UNKNOWN, or number)
 *   FAKEGPU_LOST_DEVICE=I      GPU I has fallen off the bus
 * A malformed spec is a configuration error, handled like a bad profile.
 */
#ifndef FG_FAULT_H
#define FG_FAULT_H

#include <stddef.h>

typedef struct fg_faults {
    unsigned long fail_alloc; /* 0: off */
    char nvml_call[64];       /* "": off */
    int nvml_error;
    int lost_device;          /* -1: off */
} fg_faults;

/* Parses one spec; `what` names its origin in the message ("FAKEGPU_FAIL_ALLOC"). Empty = off. */
int fg_fault_fail_alloc(fg_faults *f, const char *spec, const char *what, char *err, size_t errlen);
int fg_fault_nvml_error(fg_faults *f, const char *spec, const char *what, char *err, size_t errlen);
int fg_fault_lost_device(fg_faults *f, const char *spec, unsigned ndev, const char *what, char *err, size_t errlen);

#endif
