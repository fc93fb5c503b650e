/*
 * Test driver of the profile readers' comparison (profile_c_test.go): parses each file named on
 * the command line with fakegpu's own parser and prints what it read, one line per block: every
 * key of the block's scope in keys.def's order (the same X-macro the reader is built from), then
 * what is derived; or "error: <message>". The Go test prints the Go reader's result the same way.
 */
#include <stdio.h>

#include "profile.h"

#define PR_STR(n, b, f) printf(" %s=%s", n, (b)->f);
#define PR_GPU_UUID PR_STR
#define PR_MIG_UUID PR_STR
#define PR_PCI PR_STR
#define PR_U64(n, b, f) printf(" %s=%llu", n, (unsigned long long)(b)->f);
#define PR_UINT(n, b, f) printf(" %s=%u", n, (b)->f);
#define PR_ARCH PR_UINT
#define PR_ONOFF PR_UINT
#define PR_CC(n, b, f) printf(" %s=%u.%u", n, (b)->f##_major, (b)->f##_minor);

static void dump(const fg_profile *p) {
    printf("profile name=%s", p->name);
#define FG_KEY(scope, name, field, type, size, required, dflt) FG_IN_GLOBAL_##scope(PR_##type(#name, p, field))
#include "../keys.def"
    printf("\n");
    for (unsigned d = 0; d < p->ndev; d++) {
        const fg_device *v = &p->dev[d];
        printf("device %u", d);
#define FG_KEY(scope, name, field, type, size, required, dflt) FG_IN_DEVICE_##scope(PR_##type(#name, v, field))
#include "../keys.def"
        printf("\n");
        for (unsigned m = 0; m < v->nmig; m++) {
            const fg_mig *g = &v->mig[m];
            printf("mig %u.%u", d, m);
#define FG_KEY(scope, name, field, type, size, required, dflt) FG_IN_MIG_##scope(PR_##type(#name, g, field))
#include "../keys.def"
            printf(" slices=%u\n", g->slices);
        }
    }
}

int main(int argc, char **argv) {
    static fg_profile p;
    char err[1024];
    for (int i = 1; i < argc; i++) {
        printf("== %s\n", argv[i]);
        if (fg_profile_load(argv[i], &p, err, sizeof err) != 0)
            printf("error: %s\n", err);
        else
            dump(&p);
    }
    return 0;
}
