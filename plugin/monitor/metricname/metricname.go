// Package metricname names the metrics the node's agents export, the monitor's and the compute
// scheduler's: each registers them by these names and every reader (the doctor, the harness, the
// GPU check's script, held to them by a test) looks them up by the same constants, without linking
// the agent itself. Their help texts and labels live with the collectors (plugin/monitor,
// plugin/timeslice).
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
	DriverPIDChanged      = "hami_monitor_driver_pid_changed_total"
	DriverErrors          = "hami_monitor_driver_errors"
	DriverLastPass        = "hami_monitor_driver_last_pass_timestamp_seconds"
)

// From the compute scheduler, vgpu-scheduler (plugin/timeslice/metrics.go).
const (
	SchedulerGPUSeconds    = "vgpu_scheduler_container_gpu_seconds_total"
	SchedulerSlices        = "vgpu_scheduler_container_slices_total"
	SchedulerMaxWait       = "vgpu_scheduler_container_max_wait_seconds"
	SchedulerSwitches      = "vgpu_scheduler_gpu_switches_total"
	SchedulerOverlaps      = "vgpu_scheduler_gpu_overlaps_total"
	SchedulerOwedIdle      = "vgpu_scheduler_gpu_owed_idle_seconds_total"
	SchedulerSpeed         = "vgpu_scheduler_gpu_speed"
	SchedulerSMClock       = "vgpu_scheduler_gpu_sm_clock_mhz"
	SchedulerFullLoadClock = "vgpu_scheduler_gpu_full_load_sm_clock_mhz"
	SchedulerCalibrations  = "vgpu_scheduler_gpu_calibrations_total"
)

// From the compute check of the accounting pass (plugin/monitor/compute_metrics.go).
const (
	ComputeBusy    = "hami_container_driver_busy_ratio"
	ComputeAllowed = "hami_container_sched_allowed_ratio"
	ComputeOutside = "hami_container_compute_outside_slices"
	ComputeKills   = "hami_monitor_compute_kills_total"
)
