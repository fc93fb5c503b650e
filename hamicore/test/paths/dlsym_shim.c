/* A second interposer, preloaded after libvgpu.so: it wraps getpid and finds the real one with
 * dlsym(RTLD_NEXT, "getpid"), as interposers do. If that lookup answered relative to libvgpu.so
 * instead of this object, it would find this very function. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>

static int recursed;

__attribute__((visibility("default"))) pid_t getpid(void)
{
    pid_t (*next)(void) = (pid_t(*)(void))dlsym(RTLD_NEXT, "getpid");
    if (!next || next == getpid) {
        recursed = 1;
        return -1;
    }
    return next();
}

__attribute__((visibility("default"))) int shim_recursed(void) { return recursed; }
