/* The profile parser: every shipped profile loads; malformed input fails with file, line, fix. */
#include <stdlib.h>
#include <string.h>

#include <limitbed/nvml_abi.h>

#include "check.h"
#include "profile.h"

#define HEAD "driver_version = 550.90.07\ncuda_version = 12040\n"
#define DEV0 "device = 0\nname = X\nuuid = GPU-00000000-0000-0000-0000-000000000000\nmemory_mib = 1024\n" \
             "architecture = ampere\ncompute_capability = 8.0\nsm_count = 10\n"

static const struct {
    const char *name, *text, *want; /* want NULL: parses */
} cases[] = {
    {"minimal", HEAD DEV0, NULL},
    {"comments and blanks", "# top\n\n" HEAD "  # indented\n" DEV0 "minor = 3   # inline\n", NULL},
    {"unknown key names it, its line and the known keys", HEAD DEV0 "memroy_mib = 3\n",
     "line 10: unknown key \"memroy_mib\" (known: name uuid memory_mib"},
    {"bad number", HEAD "device = 0\nmemory_mib = 16k\n", "line 4: memory_mib: \"16k\" is not a whole number"},
    {"negative number", HEAD "context_mib = -1\n" DEV0, "line 3: context_mib: \"-1\" is not a whole number"},
    {"missing required device key", HEAD "device = 0\nname = X\nmemory_mib = 1\n", "device 0: missing required key \"uuid\""},
    {"missing required global key", "driver_version = 1\n" DEV0, "missing required key \"cuda_version\""},
    {"duplicate device index", HEAD DEV0 "device = 0\n", "line 10: device 0 defined twice (first at line 3)"},
    {"gap in device indexes", HEAD "device = 1\n", "device 0 is missing"},
    {"device index out of range", HEAD "device = 16\n", "device: \"16\" is not an index 0..15"},
    {"duplicate key", HEAD DEV0 "name = Y\n", "key \"name\" given twice"},
    {"device key before any device", HEAD "name = X\n", "key \"name\" is misplaced"},
    {"device key after a mig block", HEAD DEV0 "mig = 0\nsm_count = 3\n", "key \"sm_count\" is misplaced"},
    {"mig before device", HEAD "mig = 0\n", "mig = 0 before any device"},
    {"bad uuid", HEAD "device = 0\nuuid = GPU-1234\n", "uuid: \"GPU-1234\" is not a UUID"},
    {"gpu uuid where mig uuid belongs", HEAD DEV0 "mig = 0\nmig_uuid = GPU-00000000-0000-0000-0000-000000000000\n",
     "mig_uuid: \"GPU-00000000-0000-0000-0000-000000000000\" is not a UUID (write MIG-"},
    {"bad compute capability", HEAD "device = 0\ncompute_capability = 8\n", "is not MAJOR.MINOR"},
    {"bad architecture", HEAD "device = 0\narchitecture = blackwelll\n", "architecture: unknown \"blackwelll\""},
    {"no equals sign", HEAD "device 0\n", "line 3: expected \"key = value\""},
    {"no devices", HEAD, "no devices"},
    {"mig instances larger than the GPU", HEAD DEV0 "mig = 0\nmig_profile = a\nmig_uuid = MIG-00000000-0000-0000-0000-000000000000\n"
     "mig_memory_mib = 2048\nmig_gpu_instance_id = 1\nmig_compute_instance_id = 0\n", "more than memory_mib"},
    {"mig blocks with mig disabled", HEAD DEV0 "mig_mode = disabled\nmig = 0\nmig_profile = a\n"
     "mig_uuid = MIG-00000000-0000-0000-0000-000000000000\nmig_memory_mib = 20\nmig_gpu_instance_id = 1\n"
     "mig_compute_instance_id = 0\n", "has mig blocks but mig_mode = disabled"},
    {"mig missing key", HEAD DEV0 "mig = 0\nmig_profile = a\n", "device 0 mig 0: missing required key \"mig_uuid\""},
};

static void table(void) {
    char err[1024];
    fg_profile *p = malloc(sizeof *p);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = 0;
        int rc = fg_profile_parse("/x/t.profile", cases[i].text, p, err, sizeof err);
        if (!cases[i].want) {
            CHECK_MSG(rc == 0, "%s: %s", cases[i].name, err);
            continue;
        }
        CHECK_MSG(rc == -1 && strstr(err, cases[i].want) && strncmp(err, "profile /x/t.profile", 20) == 0,
                  "%s: got \"%s\", want \"%s\"", cases[i].name, err, cases[i].want);
    }
    free(p);
}

static fg_profile *load(const char *name) {
    char path[512], err[1024];
    const char *dir = getenv("FAKEGPU_TEST_PROFILES");
    snprintf(path, sizeof path, "%s/%s.profile", dir ? dir : "profiles", name);
    fg_profile *p = malloc(sizeof *p);
    int rc = fg_profile_load(path, p, err, sizeof err);
    CHECK_MSG(rc == 0, "%s: %s", name, err);
    return p;
}

static void shipped(void) {
    fg_profile *p = load("a16-16q");
    CHECK(strcmp(p->name, "a16-16q") == 0 && p->ndev == 1 && p->nunits == 1);
    CHECK(strcmp(p->dev[0].name, "NVIDIA A16-16Q") == 0 && p->dev[0].memory_mib == 16384);
    CHECK(p->cuda_version == 12040 && strcmp(p->driver_version, "550.90.07") == 0);
    CHECK(strcmp(p->nvml_version, "12.550.90.07") == 0); /* derived */
    CHECK(p->dev[0].cc_major == 8 && p->dev[0].cc_minor == 6 && p->dev[0].architecture == NVML_DEVICE_ARCH_AMPERE);
    CHECK(p->context_mib == 300 && p->dev[0].pci_device_id == 0x25B610DE);
    CHECK(p->dev[0].bar1_mib == 256); /* default */
    unsigned char u[16];
    CHECK(fg_uuid_bytes(p->dev[0].uuid, u) == 0 && u[0] == 0x3c && u[15] == 0x50);
    uint64_t id = fg_profile_identity(p);
    free(p);

    p = load("a100-mig");
    CHECK(p->ndev == 1 && p->dev[0].mig_enabled && p->dev[0].nmig == 3 && p->nunits == 4);
    CHECK(p->dev[0].mig[0].unit == 1 && p->dev[0].mig[2].unit == 3);
    CHECK(strcmp(p->dev[0].mig[2].profile, "2g.10gb") == 0 && p->dev[0].mig[2].gpu_instance_id == 3);
    /* nvidia-smi's MIG table: slices from the profile name, copy engines default to them */
    CHECK(p->dev[0].bar1_mib == 65536 && p->dev[0].mig[0].slices == 1 && p->dev[0].mig[2].slices == 2);
    CHECK(p->dev[0].mig[2].copy_engines == 2 && p->dev[0].mig[2].decoders == 1 && p->dev[0].mig[0].decoders == 0);
    CHECK(fg_profile_identity(p) != id);
    free(p);

    p = load("2x-a16-16q");
    CHECK(p->ndev == 2 && p->dev[1].minor == 1 && strcmp(p->dev[1].pci_bus_id, "00000000:00:06.0") == 0);
    free(p);
    free(load("a100-40g"));
    p = load("h100-80g");
    CHECK(p->dev[0].sm_count == 132 && p->dev[0].memory_mib == 81559 && p->dev[0].cc_major == 9);
    free(p);

    char err[512];
    p = malloc(sizeof *p);
    CHECK(fg_profile_load("/nonexistent/x.profile", p, err, sizeof err) == -1 && strstr(err, "cannot open"));
    free(p);
}

void test_profile(void) {
    table();
    shipped();
}
