/* Shared allocations of the device state (IPC and VMM export): charged once whatever the number
 * of holders, held until the last holder lets go or dies, never named by a wrong nonce. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "state.h"

#define MiB (1024ULL * 1024ULL)

static uint64_t used(fg_state *st, unsigned unit) {
    if (fg_state_lock(st) != 0)
        return ~0ULL;
    uint64_t u = fg_state_unit_used(st, unit);
    fg_state_unlock(st);
    return u;
}

void test_share(void) {
    char p[300], err[512];
    fg_state a;
    snprintf(p, sizeof p, "%s/share.state", fg_test_dir());
    CHECK_MSG(fg_state_attach(&a, p, 7, 2, err, sizeof err) == 0, "%s", err);
    fg_state_lock(&a);
    CHECK(fg_state_charge(&a, 0, 400 * MiB, 1000 * MiB, 0) == 0);
    int j = fg_state_share(&a, 0, 400 * MiB, FG_SHARE_IPC); /* exported: the bytes move to the entry */
    CHECK(j >= 0 && a.sh->slot[a.slot].used[0] == 0 && fg_state_unit_used(&a, 0) == 400 * MiB);
    uint64_t id = a.sh->share[j].id, nonce = a.sh->share[j].nonce;
    fg_state_unlock(&a);

    /* An importer holds it; the exporter lets go; the memory stays until the importer dies. */
    int go[2], ready[2];
    CHECK(pipe(go) == 0 && pipe(ready) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        fg_state c;
        char e[256];
        int ok = fg_state_attach(&c, p, 7, 2, e, sizeof e) == 0 && fg_state_lock(&c) == 0;
        ok = ok && fg_state_share_hold(&c, id, nonce + 1) < 0; /* a wrong nonce names nothing */
        ok = ok && fg_state_share_hold(&c, id, nonce) >= 0;
        fg_state_unlock(&c);
        if (write(ready[1], ok ? "y" : "n", 1) != 1)
            _exit(2);
        pause();
        _exit(0);
    }
    char c = 0;
    CHECK(read(ready[0], &c, 1) == 1 && c == 'y');
    fg_state_lock(&a);
    fg_state_share_drop(&a, id);
    CHECK(fg_state_unit_used(&a, 0) == 400 * MiB); /* still held by the importer: charged once */
    fg_state_unlock(&a);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CHECK(used(&a, 0) == 0); /* its last holder died: the liveness scan freed it */

    /* The table is bounded: a full one refuses, never overwrites. */
    fg_state_lock(&a);
    int n = 0;
    for (int i = 0; i < FG_MAX_SHARED + 4; i++)
        n += fg_state_share(&a, 1, 0, FG_SHARE_VMM) >= 0;
    CHECK(n == FG_MAX_SHARED);
    fg_state_unlock(&a);
    fg_state_detach(&a);
}
