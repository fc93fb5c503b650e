/*
 * Test driver of TestSameAsLibrary: prints every variable name hamicore's table holds
 * ("name <id> <name>", from lb_var_name), then, for each argument, the id lb_var_lookup gives it
 * ("lookup <arg> <id>").
 */
#include <stdio.h>
#include <string.h>

#include "limitsfile.h"

int main(int argc, char **argv) {
    char buf[64];
    for (int v = 0; v < LB_VAR_COUNT; v++)
        printf("name %d %s\n", v, lb_var_name(v, buf, sizeof buf));
    for (int i = 1; i < argc; i++)
        printf("lookup %s %d\n", argv[i], lb_var_lookup(argv[i], strlen(argv[i])));
    return 0;
}
