#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

int fg_passed, fg_failed;
static char dir[256];

const char *fg_test_dir(void) { return dir; }

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/fakegpu-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    struct {
        const char *name;
        void (*fn)(void);
    } suites[] = {{"profile", test_profile}, {"fault", test_fault}, {"state", test_state}, {"share", test_share},
                  {"timeline", test_timeline}, {"procaddr", test_procaddr}, {"event", test_event}};
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++) {
        int before = fg_failed;
        suites[i].fn();
        printf("%-10s %s\n", suites[i].name, fg_failed == before ? "ok" : "FAILED");
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    printf("%d passed, %d failed\n", fg_passed, fg_failed);
    return fg_failed ? 1 : 0;
}
