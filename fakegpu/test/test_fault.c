/* Fault specs: accepted forms and the messages for malformed ones. */
#include <string.h>

#include "check.h"
#include "fault.h"

void test_fault(void) {
    char err[512];
    fg_faults f;
    memset(&f, 0, sizeof f);
    CHECK(fg_fault_fail_alloc(&f, "3", "V", err, sizeof err) == 0 && f.fail_alloc == 3);
    CHECK(fg_fault_fail_alloc(&f, "", "V", err, sizeof err) == 0 && f.fail_alloc == 3); /* empty: unchanged */
    CHECK(fg_fault_fail_alloc(&f, "0", "V", err, sizeof err) == -1 && strstr(err, "want N >= 1"));
    CHECK(fg_fault_fail_alloc(&f, "x", "V", err, sizeof err) == -1);

    CHECK(fg_fault_nvml_error(&f, "nvmlDeviceGetMemoryInfo:NVML_ERROR_UNKNOWN", "V", err, sizeof err) == 0 &&
          strcmp(f.nvml_call, "nvmlDeviceGetMemoryInfo") == 0 && f.nvml_error == 999);
    CHECK(fg_fault_nvml_error(&f, "nvmlDeviceGetCount_v2:15", "V", err, sizeof err) == 0 && f.nvml_error == 15);
    CHECK(fg_fault_nvml_error(&f, "nvmlInit_v2:DRIVER_NOT_LOADED", "V", err, sizeof err) == 0 && f.nvml_error == 9);
    CHECK(fg_fault_nvml_error(&f, "nvmlNope:NVML_ERROR_UNKNOWN", "V", err, sizeof err) == -1 &&
          strstr(err, "not an NVML function") && f.nvml_call[0] == 0);
    CHECK(fg_fault_nvml_error(&f, "nvmlDeviceGetMemoryInfo:NVML_ERROR_BOGUS", "V", err, sizeof err) == -1 &&
          strstr(err, "not an NVML error"));
    CHECK(fg_fault_nvml_error(&f, "nvmlDeviceGetMemoryInfo:0", "V", err, sizeof err) == -1); /* success is no fault */
    CHECK(fg_fault_nvml_error(&f, "nvmlDeviceGetMemoryInfo", "V", err, sizeof err) == -1 && strstr(err, "FUNCTION:ERROR"));

    f.lost_device = -1;
    CHECK(fg_fault_lost_device(&f, "1", 2, "V", err, sizeof err) == 0 && f.lost_device == 1);
    CHECK(fg_fault_lost_device(&f, "2", 2, "V", err, sizeof err) == -1 && strstr(err, "0..1"));
}
