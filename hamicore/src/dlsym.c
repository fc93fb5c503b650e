/* dlsym interposition: a program that dlopen()s libcuda.so.1 / libnvidia-ml.so.1 and looks a
 * function up by name gets our wrapper, exactly as a program linked against the driver does.
 * Nothing is initialised here; the wrapper initialises on its first call.
 *
 * Every other lookup must be transparent. dlsym(RTLD_NEXT, name) means "the next object after
 * the CALLER", and glibc finds the caller by dlsym's return address. So for a name we do not
 * interpose, our dlsym does not call glibc's: it jumps to it, leaving the caller's return address
 * in place (x86-64 and aarch64; elsewhere RTLD_NEXT is searched after libvgpu.so). An interposer
 * preloaded after us that wraps a libc function gets libc's, not itself; so do sanitizer
 * runtimes, which look their interceptors' targets up this way before they are initialised:
 * this file runs uninstrumented and calls nothing they intercept. */
#include <dlfcn.h>

#include "guard.h"
#include "procaddr.h"
#include "symbols.h"

#define LB_NOSAN __attribute__((no_sanitize_address, no_sanitize_thread, no_sanitize_undefined))
#define LB_JUMP ((void *)1) /* lb_dlsym_decide: "jump to glibc's dlsym" */

/* glibc's dlsym, for the jump. */
__attribute__((visibility("hidden"))) void *lb_dlsym_real;

static LB_NOSAN int interposable(const char *n)
{
    return (n[0] == 'c' && n[1] == 'u') || (n[0] == 'n' && n[1] == 'v' && n[2] == 'm' && n[3] == 'l');
}

/* Our wrapper for a driver name the driver has; LB_JUMP for everything else. ra: dlsym's caller.
 * While the guard is up only the driver's own lookups are transparent: a signal handler that
 * interrupted a hook gets the wrapper, as at any other time. */
__attribute__((visibility("hidden"))) LB_NOSAN void *lb_dlsym_decide(void *handle, const char *name, const void *ra)
{
    if (!lb_dlsym_real)
        lb_dlsym_real = (void *)lb_real_dlsym_fn();
    if (!interposable(name) || (lb_guard && lb_from_driver(ra)))
        return LB_JUMP;
    /* A driver name: RTLD_NEXT from us finds the driver as it would from the program. */
    void *p = lb_real_dlsym(handle, name);
    if (!p)
        return p;
    void *w = lb_sym_wrapper_by_name(name);
    return w ? w : p;
}

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "    push %rdi\n"
        "    push %rsi\n"
        "    sub $8, %rsp\n"
        "    mov 24(%rsp), %rdx\n" /* our caller's return address */
        "    call lb_dlsym_decide\n"
        "    add $8, %rsp\n"
        "    pop %rsi\n"
        "    pop %rdi\n"
        "    cmp $1, %rax\n"
        "    jne 1f\n"
        "    jmp *lb_dlsym_real(%rip)\n"
        "1:  ret\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, %function\n"
        "dlsym:\n"
        "    stp x29, x30, [sp, #-32]!\n"
        "    stp x0, x1, [sp, #16]\n"
        "    mov x2, x30\n" /* our caller's return address */
        "    bl lb_dlsym_decide\n"
        "    mov x9, x0\n"
        "    ldp x0, x1, [sp, #16]\n"
        "    ldp x29, x30, [sp], #32\n"
        "    cmp x9, #1\n"
        "    b.ne 1f\n"
        "    adrp x16, lb_dlsym_real\n"
        "    ldr x16, [x16, :lo12:lb_dlsym_real]\n"
        "    br x16\n"
        "1:  mov x0, x9\n"
        "    ret\n"
        ".size dlsym, .-dlsym\n");
#else
LB_EXPORT void *dlsym(void *handle, const char *name)
{
    void *w = lb_dlsym_decide(handle, name, __builtin_return_address(0));
    return w == LB_JUMP ? lb_real_dlsym(handle, name) : w;
}
#endif
