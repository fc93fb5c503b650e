/*
 * Prints the scheduler files' layout as the C compiler sees it in sched.h, as JSON, for
 * TestLayoutMatchesSchedH: every field (offset and size) and every constant the Go side uses. The
 * Go test also checks that the fields listed here tile each structure without a gap.
 */
#include <stdint.h>
#include <stdio.h>

#include <limitbed/sched.h>

#define FIELD(type, f) printf("%s\"%s.%s\": [%zu, %zu]", first++ ? ",\n    " : "    ", #type, #f, \
                              offsetof(struct lb_sched_##type, f), sizeof(((struct lb_sched_##type *)0)->f))
#define CONST(name) printf(",\n    \"%s\": %llu", #name, (unsigned long long)(name))

int main(void)
{
    int first = 0;
    printf("{\n  \"fields\": {\n");
    FIELD(grant, magic);
    FIELD(grant, version);
    FIELD(grant, ngpus);
    FIELD(grant, period_us);
    FIELD(grant, reserved);
    FIELD(grant, gpu);
    FIELD(grant_entry, uuid);
    FIELD(grant_entry, word);
    FIELD(grant_entry, grant_id);
    FIELD(grant_entry, budget_us);
    FIELD(grant_entry, beat);
    FIELD(grant_entry, allowed_us);
    FIELD(grant_entry, allowed_beat);
    FIELD(grant_entry, reserved);
    FIELD(report, magic);
    FIELD(report, version);
    FIELD(report, features);
    FIELD(report, reserved);
    FIELD(report, gpu);
    FIELD(report_entry, join);
    FIELD(report_entry, want);
    FIELD(report_entry, active);
    FIELD(report_entry, bell);
    FIELD(report_entry, reserved);
    printf("\n  },\n  \"sizes\": {\"grant\": %zu, \"grant_entry\": %zu, \"report\": %zu, \"report_entry\": %zu},\n",
           sizeof(struct lb_sched_grant), sizeof(struct lb_sched_grant_entry), sizeof(struct lb_sched_report),
           sizeof(struct lb_sched_report_entry));
    printf("  \"constants\": {\n    \"LB_SCHED_VERSION\": %u", LB_SCHED_VERSION);
    CONST(LB_SCHED_GRANT_MAGIC);
    CONST(LB_SCHED_REPORT_MAGIC);
    CONST(LB_SCHED_MAX_GPUS);
    CONST(LB_SCHED_FILE_SIZE);
    CONST(LB_GRANT_STATE_MASK);
    CONST(LB_GRANT_SEQ_SHIFT);
    CONST(LB_GRANT_OFF);
    CONST(LB_GRANT_WAIT);
    CONST(LB_GRANT_RUN);
    CONST(LB_GRANT_FREE);
    CONST(LB_JOIN_GRANT_SHIFT);
    CONST(LB_JOIN_JOINS_SHIFT);
    CONST(LB_JOIN_COUNT_MASK);
    CONST(LB_REPORT_F_LIVE);
    CONST(LB_SCHED_LIVE_BYTE(0));
    printf("\n  },\n  \"paths\": {\"grant\": \"%s\", \"report\": \"%s\"}\n}\n", LB_SCHED_GRANT_PATH, LB_SCHED_REPORT_PATH);
    return 0;
}
