/* Preloaded after libvgpu.so by the no-region program: every mmap that libvgpu.so itself makes
 * fails (its callers are told apart by return address), so neither the usage cache nor its
 * private fallbacks can be mapped; everyone else's mmap works. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

__attribute__((visibility("default"))) void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    Dl_info i;
    if (dladdr(__builtin_return_address(0), &i) && i.dli_fname && strstr(i.dli_fname, "libvgpu")) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}
