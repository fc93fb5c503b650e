/*
 * Prints the usage region's layout as the C compiler sees it in region.h, as JSON, for
 * TestLayoutMatchesRegionH: every field of both structures (offset and size) and every constant
 * the Go decoder uses. The Go test also checks that the fields listed here tile each structure
 * without a gap, so a field added to region.h but not listed here fails it too.
 */
#include <stdint.h>
#include <stdio.h>

#include <limitbed/region.h>

#define FIELD(type, f) printf("%s\"%s.%s\": [%zu, %zu]", first++ ? ",\n    " : "    ", #type, #f, \
                              offsetof(struct lb_region_##type, f), sizeof(((struct lb_region_##type *)0)->f))
#define CONST(name) printf(",\n    \"%s\": %llu", #name, (unsigned long long)(name))

int main(void)
{
    int first = 0;
    printf("{\n  \"fields\": {\n");
    FIELD(header, magic);
    FIELD(header, version);
    FIELD(header, header_size);
    FIELD(header, file_size);
    FIELD(header, max_devices);
    FIELD(header, max_slots);
    FIELD(header, slot_size);
    FIELD(header, lock_offset);
    FIELD(header, creator_pid);
    FIELD(header, limits_format);
    FIELD(header, slot_hwm);
    FIELD(header, policy);
    FIELD(header, priority);
    FIELD(header, flags);
    FIELD(header, mem_limit);
    FIELD(header, sm_limit);
    FIELD(header, mutex);
    FIELD(header, used_total);
    FIELD(header, util_switch);
    FIELD(header, reserved0);
    FIELD(header, recent_kernel);
    FIELD(header, reserved1);
    FIELD(header, dev_uuid);
    FIELD(header, calib_at);
    FIELD(header, work_factor);
    FIELD(header, reserved);
    FIELD(slot, state);
    FIELD(slot, pid);
    FIELD(slot, hostpid);
    FIELD(slot, reserved0);
    FIELD(slot, claimed_at);
    FIELD(slot, reserved1);
    FIELD(slot, used);
    FIELD(slot, reserved2);
    printf("\n  },\n  \"sizes\": {\n    \"header\": %zu,\n    \"slot\": %zu\n  },\n", sizeof(struct lb_region_header),
           sizeof(struct lb_region_slot));
    printf("  \"constants\": {\n    \"LB_REGION_MAGIC\": %llu", (unsigned long long)LB_REGION_MAGIC);
    CONST(LB_REGION_VERSION);
    CONST(LB_REGION_MAX_DEVICES);
    CONST(LB_REGION_MAX_SLOTS);
    CONST(LB_REGION_HEADER_SIZE);
    CONST(LB_REGION_SLOT_SIZE);
    CONST(LB_REGION_LOCK_OFFSET);
    CONST(LB_REGION_LOCK_BYTES);
    CONST(LB_REGION_FILE_SIZE);
    CONST(LB_MEM_UNLIMITED);
    CONST(LB_SLOT_FREE);
    CONST(LB_SLOT_ACTIVE);
    CONST(LB_POLICY_DEFAULT);
    CONST(LB_POLICY_FORCE);
    CONST(LB_POLICY_DISABLE);
    CONST(LB_FLAG_OVERSUBSCRIBE);
    CONST(LB_FLAG_OVERFLOW_SEEN);
    printf("\n  }\n}\n");
    return 0;
}
