// Package libvars names the variables libvgpu.so reads, from the container's environment and
// from its limits file: the Go side's one list. The C side's is hamicore's enum lb_var with
// lb_var_name (hamicore/src/limitsfile_vars.c); TestSameAsLibrary builds that C and holds the
// two lists to each other by their strings, both ways.
package libvars

import (
	"slices"
	"strconv"

	"github.com/limitbed/limitbed/plugin/region"
)

// The variables, as HAMi names them.
const (
	// MemoryLimit is every device's memory limit; MemoryLimitOf(i) device i's.
	MemoryLimit = "CUDA_DEVICE_MEMORY_LIMIT"
	// SMLimit is the core limit (device 0's speaks for all, as upstream sets it); SMLimitOf(i) device i's.
	SMLimit       = "CUDA_DEVICE_SM_LIMIT"
	SharedCache   = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
	Oversubscribe = "CUDA_OVERSUBSCRIBE"
	CorePolicy    = "GPU_CORE_UTILIZATION_POLICY"
	TaskPriority  = "CUDA_TASK_PRIORITY"
	LogLevel      = "LIBCUDA_LOG_LEVEL"
	HostPIDBroker = "LIBVGPU_HOSTPID_BROKER"
	// LimitsFormat is the version line of the limits file.
	LimitsFormat = "HAMI_LIMITS_FORMAT"
)

// Devices is how many indexed forms each of MemoryLimit and SMLimit has (_0 … _15): one per
// device entry of the shared region.
const Devices = region.MaxDevices

// MemoryLimitOf names device i's memory limit: CUDA_DEVICE_MEMORY_LIMIT_<i>.
func MemoryLimitOf(i int) string { return MemoryLimit + "_" + strconv.Itoa(i) }

// SMLimitOf names device i's core limit: CUDA_DEVICE_SM_LIMIT_<i>.
func SMLimitOf(i int) string { return SMLimit + "_" + strconv.Itoa(i) }

// Names is every variable the library reads, the indexed forms spelled out, in the library's order.
func Names() []string {
	out := []string{MemoryLimit}
	for i := range Devices {
		out = append(out, MemoryLimitOf(i))
	}
	out = append(out, SMLimit)
	for i := range Devices {
		out = append(out, SMLimitOf(i))
	}
	return append(out, fixed...)
}

// Patterns is every variable with the indexed forms as one "<i>" pattern each, sorted: the rows
// of the reference's library table.
func Patterns() []string {
	out := append([]string{MemoryLimit, MemoryLimit + "_<i>", SMLimit, SMLimit + "_<i>"}, fixed...)
	slices.Sort(out)
	return out
}

var fixed = []string{SharedCache, Oversubscribe, CorePolicy, TaskPriority, LogLevel, HostPIDBroker, LimitsFormat}
