/* Names of NVML entry points and return codes, shared by libnvidia-ml and the fault parser. */
#ifndef FG_NVML_NAMES_H
#define FG_NVML_NAMES_H

typedef struct fg_nvml_error {
    int code;
    const char *name;   /* "NVML_ERROR_UNKNOWN" */
    const char *text;   /* what nvmlErrorString returns */
} fg_nvml_error;

extern const fg_nvml_error fg_nvml_errors[];
extern const unsigned fg_nvml_nerrors;
extern const char *const fg_nvml_functions[]; /* every export, from nvml_api.def */
extern const unsigned fg_nvml_nfunctions;

int fg_nvml_function_known(const char *name);
/* "NVML_ERROR_UNKNOWN", "UNKNOWN" or "999" → code; -1 if not a known code. */
int fg_nvml_error_code(const char *s);

#endif
