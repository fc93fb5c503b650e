/* libFuzzer target for the module-globals reader (abi/include/limitbed/modglobals.h), which runs
 * inside libvgpu.so's module-load hooks on images a program hands the driver: any bytes of a known
 * length, read as PTX, an ELF cubin or a fatbin, must never read outside them, crash or overflow.
 * The fatbin wrapper (its magic first) carries a pointer and is not fuzzed: it is followed as the
 * driver follows it; nor is a length of 0, which means "unknown" (cuModuleLoadData's pointer). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "limitbed/modglobals.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0 || (size >= 4 && (uint32_t)lb_mg_rd(data, 4) == LB_MG_FATBIN_WRAPPER))
        return 0;
    uint64_t b = 0;
    (void)lb_module_globals(data, size, &b);
    return 0;
}
