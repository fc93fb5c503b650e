/*
 * Every NVML function fakegpu does not simulate, generated from nvml_api.def: exported so that a
 * lazily bound caller (go-nvml) never dies of "symbol lookup error", answering
 * NVML_ERROR_NOT_SUPPORTED as the real library does for a feature a GPU lacks. Declared without
 * parameters: the caller's arguments are ignored, which the C calling convention allows.
 */
#include "nvml_internal.h"

static nvmlReturn_t stub(const char *fn) {
    nvmlReturn_t r = fg_nv_enter(fn);
    return r != NVML_SUCCESS ? r : NVML_ERROR_NOT_SUPPORTED;
}

#define FG_NVML_IMPL(name)
#define FG_NVML_STUB(name)                                                                                             \
    FG_EXPORT nvmlReturn_t name(void);                                                                                 \
    FG_EXPORT nvmlReturn_t name(void) { return stub(#name); }
#define FG_NVML(kind, name) FG_NVML_##kind(name)
#include "nvml_api.def"
#undef FG_NVML
