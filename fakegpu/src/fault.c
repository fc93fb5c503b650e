#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "nvml_names.h"

static int number(const char *s, unsigned long *out) {
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    *out = strtoul(s, &end, 10);
    return errno || *end ? -1 : 0;
}

int fg_fault_fail_alloc(fg_faults *f, const char *spec, const char *what, char *err, size_t errlen) {
    if (!spec || !*spec)
        return 0;
    if (number(spec, &f->fail_alloc) || f->fail_alloc == 0) {
        snprintf(err, errlen, "%s=\"%s\": want N >= 1, the allocation call that fails (e.g. %s=3)", what, spec, what);
        return -1;
    }
    return 0;
}

int fg_fault_nvml_error(fg_faults *f, const char *spec, const char *what, char *err, size_t errlen) {
    if (!spec || !*spec)
        return 0;
    const char *colon = strchr(spec, ':');
    size_t n = colon ? (size_t)(colon - spec) : 0;
    if (!colon || n == 0 || n >= sizeof f->nvml_call) {
        snprintf(err, errlen, "%s=\"%s\": want FUNCTION:ERROR (e.g. %s=nvmlDeviceGetMemoryInfo:NVML_ERROR_UNKNOWN)",
                 what, spec, what);
        return -1;
    }
    memcpy(f->nvml_call, spec, n);
    f->nvml_call[n] = 0;
    if (!fg_nvml_function_known(f->nvml_call)) {
        snprintf(err, errlen, "%s=\"%s\": \"%s\" is not an NVML function fakegpu exports (exact name, e.g. nvmlDeviceGetMemoryInfo_v2)",
                 what, spec, f->nvml_call);
        f->nvml_call[0] = 0;
        return -1;
    }
    f->nvml_error = fg_nvml_error_code(colon + 1);
    if (f->nvml_error <= 0) {
        snprintf(err, errlen, "%s=\"%s\": \"%s\" is not an NVML error (a name like NVML_ERROR_UNKNOWN or its number)",
                 what, spec, colon + 1);
        f->nvml_call[0] = 0;
        return -1;
    }
    return 0;
}

int fg_fault_lost_device(fg_faults *f, const char *spec, unsigned ndev, const char *what, char *err, size_t errlen) {
    if (!spec || !*spec)
        return 0;
    unsigned long v;
    if (number(spec, &v) || v >= ndev) {
        snprintf(err, errlen, "%s=\"%s\": want a device index 0..%u of the profile", what, spec, ndev - 1);
        return -1;
    }
    f->lost_device = (int)v;
    return 0;
}
