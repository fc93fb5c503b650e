#include "nvml_internal.h"
#include "nvml_names.h"

FG_EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    for (unsigned i = 0; i < fg_nvml_nerrors; i++)
        if (fg_nvml_errors[i].code == (int)result)
            return fg_nvml_errors[i].text;
    return "Unknown Error";
}
