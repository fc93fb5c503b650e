/*
 * spawnat: start a command as a process with the PID chosen, the test bed's way to make a process
 * take the PID of one that just ended (the node monitor's PID-reuse cases, docs/attacks.md).
 *
 *   spawnat [--cgroup DIR]... [--cgroups-of PID] [--pidns-of PID --nspid N] HOSTPID COMMAND [ARG]...
 *
 * It moves itself into each cgroup DIR (0 written to DIR/cgroup.procs, so the child is born there)
 * and, with --cgroups-of, into every cgroup of process PID (its /proc/PID/cgroup, on the cgroup
 * mounts this process sees: /proc/self/mountinfo; a hierarchy's root is left alone),
 * enters the PID namespace of process PID (/proc/PID/ns/pid) when given, and clone3()s with
 * set_tid = {N, HOSTPID} (or {HOSTPID}): the child calls itself N in that namespace and is HOSTPID
 * in this one. The child execs COMMAND (searched in PATH). spawnat prints HOSTPID on one line, then
 * waits for the child and exits with its status (128 + the signal that ended it).
 * Needs CAP_SYS_ADMIN over every PID namespace whose PID it sets (root on the host). Exit 3 when the
 * PID is taken, 2 on a usage error, 1 on any other failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_clone3
#define SYS_clone3 435
#endif

/* The kernel's struct clone_args up to set_tid_size (CLONE_ARGS_SIZE_VER1), declared here so the
 * tool builds against any libc's headers. */
struct clone_args_v1 {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size;
};

static int usage(const char *msg) {
    fprintf(stderr, "spawnat: %s\nusage: spawnat [--cgroup DIR]... [--cgroups-of PID] [--pidns-of PID --nspid N] HOSTPID COMMAND [ARG]...\n",
            msg);
    return 2;
}

static int number(const char *s, pid_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v <= 0 || v > 0x3fffffff)
        return -1;
    *out = (pid_t)v;
    return 0;
}

static int join_cgroup(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) {
        fprintf(stderr, "spawnat: join %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* Whether every controller of ctrls ("cpu,cpuacct", "name=systemd") is among opts ("rw,cpu,cpuacct"). */
static int has_all(const char *opts, const char *ctrls) {
    char want[256], have[1100];
    snprintf(want, sizeof want, "%s", ctrls);
    snprintf(have, sizeof have, ",%s,", opts);
    for (char *save = NULL, *c = strtok_r(want, ",", &save); c; c = strtok_r(NULL, ",", &save)) {
        char needle[300];
        snprintf(needle, sizeof needle, ",%s,", c);
        if (!strstr(have, needle))
            return 0;
    }
    return 1;
}

/* The mount point of the cgroup hierarchy of controllers ctrls ("": the unified one), or -1. */
static int find_mount(const char *ctrls, char *out, size_t len) {
    FILE *mi = fopen("/proc/self/mountinfo", "re");
    if (!mi)
        return -1;
    char line[8192];
    int found = -1;
    while (found < 0 && fgets(line, sizeof line, mi)) {
        char *sep = strstr(line, " - ");
        if (!sep)
            continue;
        *sep = 0;
        char fstype[32], source[256], opts[1024], mnt[4096];
        if (sscanf(sep + 3, "%31s %255s %1023s", fstype, source, opts) != 3 ||
            sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
            continue;
        if ((!*ctrls && !strcmp(fstype, "cgroup2")) || (*ctrls && !strcmp(fstype, "cgroup") && has_all(opts, ctrls)))
            found = snprintf(out, len, "%s", mnt) < (int)len ? 0 : -1;
    }
    fclose(mi);
    return found;
}

/* Moves this process into every cgroup of process pid other than a hierarchy's root. */
static int join_cgroups_of(pid_t pid) {
    char path[64], line[4096];
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    FILE *cg = fopen(path, "re");
    if (!cg) {
        fprintf(stderr, "spawnat: %s: %s\n", path, strerror(errno));
        return -1;
    }
    int joined = 0, failed = 0;
    while (!failed && fgets(line, sizeof line, cg)) {
        line[strcspn(line, "\n")] = 0;
        char *ctrls = strchr(line, ':'), *cpath = ctrls ? strchr(ctrls + 1, ':') : NULL;
        if (!cpath)
            continue;
        *ctrls++ = 0, *cpath++ = 0;
        char mnt[4096], dir[8192];
        if (!strcmp(cpath, "/") || find_mount(ctrls, mnt, sizeof mnt) != 0)
            continue;
        snprintf(dir, sizeof dir, "%s%s", mnt, cpath);
        failed = join_cgroup(dir) != 0;
        joined++;
    }
    fclose(cg);
    if (!failed && !joined)
        fprintf(stderr, "spawnat: process %d has no cgroup of its own on this process's mounts\n", (int)pid);
    return failed || !joined ? -1 : 0;
}

static int enter_pidns(pid_t of) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)of);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWPID) != 0) {
        fprintf(stderr, "spawnat: enter %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    pid_t nsof = 0, nspid = 0, hostpid = 0;
    int i = 1;
    for (; i < argc && !strncmp(argv[i], "--", 2); i += 2) {
        if (i + 1 >= argc)
            return usage("an option without its value");
        if (!strcmp(argv[i], "--cgroup")) {
            if (join_cgroup(argv[i + 1]) != 0)
                return 1;
        } else if (!strcmp(argv[i], "--cgroups-of")) {
            pid_t of;
            if (number(argv[i + 1], &of) != 0)
                return usage("--cgroups-of wants a PID");
            if (join_cgroups_of(of) != 0)
                return 1;
        } else if (!strcmp(argv[i], "--pidns-of")) {
            if (number(argv[i + 1], &nsof) != 0)
                return usage("--pidns-of wants a PID");
        } else if (!strcmp(argv[i], "--nspid")) {
            if (number(argv[i + 1], &nspid) != 0)
                return usage("--nspid wants a PID");
        } else {
            return usage("unknown option");
        }
    }
    if (argc - i < 2 || number(argv[i], &hostpid) != 0)
        return usage("HOSTPID and COMMAND are required");
    if (!nsof != !nspid)
        return usage("--pidns-of and --nspid go together");
    if (nsof && enter_pidns(nsof) != 0)
        return 1;
    pid_t tids[2] = {nspid, hostpid};
    struct clone_args_v1 ca = {.exit_signal = SIGCHLD};
    ca.set_tid = (uint64_t)(uintptr_t)(nsof ? tids : tids + 1);
    ca.set_tid_size = nsof ? 2 : 1;
    long child = syscall(SYS_clone3, &ca, sizeof ca);
    if (child < 0) {
        fprintf(stderr, "spawnat: clone3 with PID %d: %s\n", (int)hostpid, strerror(errno));
        return errno == EEXIST ? 3 : 1;
    }
    if (child == 0) {
        execvp(argv[i + 1], argv + i + 1);
        fprintf(stderr, "spawnat: exec %s: %s\n", argv[i + 1], strerror(errno));
        _exit(127);
    }
    printf("%ld\n", child);
    fflush(stdout);
    int st;
    while (waitpid((pid_t)child, &st, 0) < 0)
        if (errno != EINTR)
            return 1;
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}
