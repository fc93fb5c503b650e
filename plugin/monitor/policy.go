package monitor

import "github.com/limitbed/limitbed/plugin/region"

// The `default` compute policy: a container's limit applies only while
// another container on the same physical GPU, with the same or a higher
// priority (CUDA_TASK_PRIORITY: a lower number is a higher priority, as in
// HAMi), has launched kernels recently. Containers cannot see each other,
// so the node monitor decides and writes each region's util_switch; libvgpu
// under `default` throttles while it reads 1. `force` and `disable` are
// decided inside each process and ignore the switch.

// ComputeState is what the decision needs from one container's region.
type ComputeState struct {
	Key      string // the container directory's name
	Priority int32
	Active   bool // launched kernels within the monitor's hold time
	// GPUs are the physical GPUs the container's processes launched on
	// (their UUIDs as the region records them). Empty: not known yet (no
	// launch yet); such a container is taken to share every GPU.
	GPUs [][region.UUIDBytes]byte
}

// Switches decides every container's util_switch: 1 when some other active
// container shares one of its GPUs (or either side's GPUs are unknown) and
// has the same or a higher priority; else 0. A pure function of its input.
func Switches(cs []ComputeState) map[string]uint32 {
	out := make(map[string]uint32, len(cs))
	for i, c := range cs {
		out[c.Key] = 0
		for j, o := range cs {
			if i != j && o.Active && o.Priority <= c.Priority && shareGPU(c.GPUs, o.GPUs) {
				out[c.Key] = 1
				break
			}
		}
	}
	return out
}

func shareGPU(a, b [][region.UUIDBytes]byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}
