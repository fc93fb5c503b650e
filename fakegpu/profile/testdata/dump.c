/*
 * Test driver of the profile readers' comparison (profile_c_test.go): parses each file named on
 * the command line with fakegpu's own parser and prints what it read, one canonical line per
 * block, or "error: <message>". The Go test prints the Go reader's result the same way.
 */
#include <stdio.h>

#include "profile.h"

static void dump(const fg_profile *p) {
    printf("profile name=%s driver=%s cuda=%u nvml=%s context=%llu launch=%llu block=%llu fail_alloc=%s "
           "nvml_error=%s lost_device=%s timeslice=%llu boost=%llu samples=%s sm_clock=%llu\n",
           p->name, p->driver_version, p->cuda_version, p->nvml_version, (unsigned long long)p->context_mib,
           (unsigned long long)p->launch_ns, (unsigned long long)p->block_ns, p->fail_alloc, p->nvml_error,
           p->lost_device, (unsigned long long)p->timeslice_us, (unsigned long long)p->power_boost, p->nvml_samples,
           (unsigned long long)p->sm_clock_mhz);
    for (unsigned d = 0; d < p->ndev; d++) {
        const fg_device *v = &p->dev[d];
        printf("device %u name=%s uuid=%s memory=%llu pci=%s pci_id=%u minor=%u arch=%u cc=%u.%u sm=%u mig=%u bar1=%llu\n",
               d, v->name, v->uuid, (unsigned long long)v->memory_mib, v->pci_bus_id, v->pci_device_id, v->minor,
               v->architecture, v->cc_major, v->cc_minor, v->sm_count, v->mig_enabled, (unsigned long long)v->bar1_mib);
        for (unsigned m = 0; m < v->nmig; m++) {
            const fg_mig *g = &v->mig[m];
            printf("mig %u.%u profile=%s uuid=%s memory=%llu gi=%u ci=%u sm=%u ce=%u dec=%u enc=%u jpg=%u ofa=%u slices=%u\n",
                   d, m, g->profile, g->uuid, (unsigned long long)g->memory_mib, g->gpu_instance_id,
                   g->compute_instance_id, g->sm_count, g->copy_engines, g->decoders, g->encoders, g->jpegs, g->ofas,
                   g->slices);
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
