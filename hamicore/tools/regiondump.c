/* regiondump PATH: print a usage.cache as one JSON object (limits, slots with pid, host pid,
 * liveness and per-device bytes, per-device totals of live slots). Read-only; exit 1 if the file
 * is not a limitbed v1 region. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "limitbed/region.h"

static void print_limit(uint64_t v) { v == LB_MEM_UNLIMITED ? printf("-1") : printf("%llu", (unsigned long long)v); }

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: regiondump PATH\n");
        return 2;
    }
    int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        perror(argv[1]);
        return 1;
    }
    if (st.st_size != (off_t)LB_REGION_FILE_SIZE) {
        fprintf(stderr, "%s: size %lld, not a limitbed v%u region (%u bytes)\n", argv[1], (long long)st.st_size,
                LB_REGION_VERSION, LB_REGION_FILE_SIZE);
        return 1;
    }
    struct lb_region_header *h = mmap(NULL, LB_REGION_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    if (h->magic != LB_REGION_MAGIC || h->version != LB_REGION_VERSION) {
        fprintf(stderr, "%s: bad magic 0x%llx or version %u\n", argv[1], (unsigned long long)h->magic, h->version);
        return 1;
    }
    uint64_t total[LB_REGION_MAX_DEVICES] = {0};
    printf("{\"path\":\"%s\",\"version\":%u,\"file_size\":%llu,\"creator_pid\":%d,\"limits_format\":%u,"
           "\"policy\":%u,\"priority\":%d,\"flags\":%u,\"slot_hwm\":%u,\"mem_limit\":[",
           argv[1], h->version, (unsigned long long)h->file_size, h->creator_pid, h->limits_format, h->policy,
           h->priority, (unsigned)h->flags, (unsigned)h->slot_hwm);
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++) {
        printf(d ? "," : "");
        print_limit(h->mem_limit[d]);
    }
    printf("],\"sm_limit\":[");
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++)
        printf("%s%u", d ? "," : "", h->sm_limit[d]);
    printf("],\"slots\":[");
    struct lb_region_slot *s = lb_region_slots(h);
    int first = 1;
    for (uint32_t i = 0; i < h->slot_hwm && i < LB_REGION_MAX_SLOTS; i++) {
        if (s[i].state != LB_SLOT_ACTIVE)
            continue;
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = h->lock_offset + 1 + i, .l_len = 1};
        int alive = fcntl(fd, F_GETLK, &fl) != 0 || fl.l_type != F_UNLCK;
        printf("%s{\"index\":%u,\"pid\":%d,\"hostpid\":%d,\"alive\":%s,\"claimed_at\":%llu,\"used\":[", first ? "" : ",",
               i, s[i].pid, s[i].hostpid, alive ? "true" : "false", (unsigned long long)s[i].claimed_at);
        first = 0;
        for (int d = 0; d < LB_REGION_MAX_DEVICES; d++) {
            printf("%s%llu", d ? "," : "", (unsigned long long)s[i].used[d]);
            if (alive)
                total[d] += s[i].used[d];
        }
        printf("]}");
    }
    printf("],\"used\":[");
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++)
        printf("%s%llu", d ? "," : "", (unsigned long long)total[d]);
    /* The counter the allocation path checks (sum of all slots, dead unreclaimed ones included). */
    printf("],\"used_total\":[");
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++)
        printf("%s%llu", d ? "," : "", (unsigned long long)h->used_total[d]);
    printf("],\"util_switch\":%u,\"recent_kernel\":%u,\"dev_uuid\":[", (unsigned)h->util_switch,
           (unsigned)h->recent_kernel);
    /* GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, or "" while not stamped */
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++) {
        const uint8_t *u = h->dev_uuid[d];
        int known = 0;
        for (int i = 0; i < 16; i++)
            known |= u[i];
        printf("%s\"", d ? "," : "");
        if (known)
            printf("GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3],
                   u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
        printf("\"");
    }
    printf("]}\n");
    return 0;
}
