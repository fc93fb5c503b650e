/* dlsym interposition: a program that dlopen()s libcuda.so.1 / libnvidia-ml.so.1 and looks a
 * function up by name gets our wrapper, exactly as a program linked against the driver does.
 * Nothing is initialised here; the wrapper initialises on its first call. */
#include <dlfcn.h>
#include <string.h>

#include "init.h"
#include "symbols.h"

LB_EXPORT void *dlsym(void *handle, const char *name)
{
    /* Note on RTLD_NEXT: the lookup starts after libvgpu.so rather than after the caller; for
     * the names we interpose the answer is our wrapper either way. */
    void *p = lb_real_dlsym(handle, name);
    if (!p || lb_guard)
        return p;
    if ((name[0] == 'c' && name[1] == 'u') || strncmp(name, "nvml", 4) == 0) {
        void *w = lb_sym_wrapper_by_name(name);
        if (w)
            return w;
    }
    return p;
}
