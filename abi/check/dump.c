/*
 * Prints every constant, size and offset listed in a .def file, as seen through one header.
 * abi-check.sh builds it twice — our declarations, then the real header — and diffs the output.
 */
#include <stddef.h>
#include <stdio.h>

#include ABI_HEADER

#define CONST(x) printf("const %s %lld\n", #x, (long long)(x));
#define SIZE(t) printf("size %s %zu\n", #t, sizeof(t));
#define OFFSET(t, f) printf("offset %s.%s %zu\n", #t, #f, offsetof(t, f));

int main(void)
{
#include FIELDS
    return 0;
}
