/*
 * A new region's header (stamped by its first process: first writer wins, as upstream) and what a
 * later process with other limits is told (region.c attaches).
 */
#include "region.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "fmt.h"
#include "limitsfile.h"
#include "log.h"

/* fresh: the file was just extended from size 0, so it reads as zeros already; writing them
 * again would fault in every page of it (49 page-cache pages: most of the cost of creating a
 * region). A region whose creator died before writing the magic may hold anything: cleared. */
void lb_region_stamp(struct lb_region_header *h, const struct lb_config *cfg, int fresh)
{
    if (!fresh)
        memset(h, 0, LB_REGION_LOCK_OFFSET);
    h->version = LB_REGION_VERSION;
    h->header_size = LB_REGION_HEADER_SIZE;
    h->file_size = LB_REGION_FILE_SIZE;
    h->max_devices = LB_REGION_MAX_DEVICES;
    h->max_slots = LB_REGION_MAX_SLOTS;
    h->slot_size = LB_REGION_SLOT_SIZE;
    h->lock_offset = LB_REGION_LOCK_OFFSET;
    h->creator_pid = (int32_t)getpid();
    h->limits_format = cfg->format;
    h->policy = cfg->policy;
    h->priority = cfg->priority;
    h->flags = cfg->oversubscribe ? LB_FLAG_OVERSUBSCRIBE : 0;
    h->util_switch = 1; /* as upstream: the limit applies until a monitor says the GPU is not shared */
    memcpy(h->mem_limit, cfg->mem_limit, sizeof h->mem_limit);
    memcpy(h->sm_limit, cfg->sm_limit, sizeof h->sm_limit);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&h->mutex.m, &a);
    pthread_mutexattr_destroy(&a);
    atomic_store_explicit(&h->magic, LB_REGION_MAGIC, memory_order_release);
}

static const char *limit_str(uint64_t v, char *buf, size_t n)
{
    if (v == LB_MEM_UNLIMITED)
        return "unlimited";
    lb_fmt(buf, n, "%llu bytes", (unsigned long long)v);
    return buf;
}

void lb_region_compare(const struct lb_region_header *h, const struct lb_config *cfg, const char *path)
{
    char a[40], b[40];
    for (int d = 0; d < LB_REGION_MAX_DEVICES; d++) {
        if (h->mem_limit[d] != cfg->mem_limit[d])
            LB_ERROR("%s: device %d memory limit conflict: this process has %s, the region has %s (stamped by pid "
                     "%d); the lower of the two applies",
                     path, d, limit_str(cfg->mem_limit[d], a, sizeof a), limit_str(h->mem_limit[d], b, sizeof b),
                     h->creator_pid);
        if (h->sm_limit[d] != cfg->sm_limit[d])
            LB_INFO("%s: device %d SM limit conflict: this process has %u%%, the region has %u%%; the region's "
                    "applies",
                    path, d, cfg->sm_limit[d], h->sm_limit[d]);
    }
}
