// Package metricname names the metrics the node monitor exports: the monitor registers them by
// these names and every reader (the doctor, the harness) looks them up by the same constants,
// without linking the monitor itself. Their help texts and labels live with the monitor's
// collectors (plugin/monitor).
package metricname

// From the limits files and usage regions (plugin/monitor/metrics.go).
const (
	MemoryLimit        = "hami_container_memory_limit_bytes"
	CoreLimit          = "hami_container_core_limit_ratio"
	MemoryUsed         = "hami_container_memory_used_bytes"
	MemoryLive         = "hami_container_memory_live_bytes"
	Processes          = "hami_container_processes"
	RegionDeadSlots    = "hami_container_region_dead_slots"
	RegionOverflow     = "hami_container_region_overflow"
	RegionMemoryLimit  = "hami_container_region_memory_limit_bytes"
	RegionErrors       = "hami_container_region_errors"
	RegionFileRejected = "hami_container_region_file_rejected"
	Removed            = "hami_monitor_removed_total"
)

// From the driver-truth accounting pass (plugin/monitor/driver_metrics.go).
const (
	DriverMemory          = "hami_container_driver_memory_bytes"
	DriverMemoryBound     = "hami_container_driver_memory_bound_bytes"
	DriverMemoryOverLimit = "hami_container_driver_memory_over_limit"
	DriverProcesses       = "hami_container_driver_processes"
	DriverProcessMemory   = "hami_driver_process_memory_bytes"
	DriverUnattributed    = "hami_node_driver_unattributed_memory_bytes"
	DriverKills           = "hami_monitor_driver_kills_total"
	DriverErrors          = "hami_monitor_driver_errors"
	DriverLastPass        = "hami_monitor_driver_last_pass_timestamp_seconds"
)

// From the compute check of the accounting pass (plugin/monitor/compute_metrics.go).
const (
	ComputeBusy    = "hami_container_driver_busy_ratio"
	ComputeAllowed = "hami_container_sched_allowed_ratio"
	ComputeOutside = "hami_container_compute_outside_slices"
	ComputeKills   = "hami_monitor_compute_kills_total"
)
