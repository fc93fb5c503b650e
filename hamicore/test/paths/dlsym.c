/* dlsym is transparent for names libvgpu.so does not interpose: run with dlsym_shim.so preloaded
 * after the library (run.sh does). native and limited: getpid() through the shim answers the
 * real pid; the shim's RTLD_NEXT lookup found libc's getpid, not the shim's own. The driver's
 * names still resolve (to the library's wrappers under it). */
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "path.h"

int main(void)
{
    path_begin();
    int (*recursed)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "shim_recursed");
    EXPECT(recursed != NULL, "the second interposer is loaded");
    pid_t p = getpid();
    EXPECT(p == (pid_t)syscall(SYS_getpid), "getpid through the second interposer: %d", (int)p);
    EXPECT(recursed && !recursed(), "its dlsym(RTLD_NEXT, \"getpid\") found libc's, not itself");
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    EXPECT(h && dlsym(h, "cuMemAlloc_v2") != NULL, "dlsym of a driver name still answers");
    return path_end("dlsym-next");
}
