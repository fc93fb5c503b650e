package monitor

// The `default` compute policy: a container's limit applies only while
// another container on the same physical GPU, with the same or a higher
// priority (CUDA_TASK_PRIORITY: a lower number is a higher priority, as in
// HAMi), has launched kernels recently. Containers cannot see each other,
// so the node monitor decides and writes each region's util_switch; libvgpu
// under `default` throttles while it reads 1. `force` and `disable` are
// decided inside each process and ignore the switch.

// ComputeState is what the decision needs from one container: its activity
// from its region (a launch sets recent_kernel), everything else from the
// node's own records (package identity), never from the region.
type ComputeState struct {
	Key    string // the container directory's name
	Active bool   // launched kernels within the monitor's hold time
	// Known is false for a container the identity does not know (yet): it is
	// throttled to its limit, and as a neighbour it counts with the highest
	// priority on every GPU (fail closed).
	Known    bool
	Priority int32 // CUDA_TASK_PRIORITY from its limits (lower is higher)
	// GPUs are the UUIDs of the physical GPUs (or MIG devices) the container
	// holds. nil: not known; such a container is taken to share every GPU.
	GPUs []string
}

// Switches decides every container's util_switch: 1 when some other active
// container shares one of its GPUs (or either side's GPUs are unknown) and
// has the same or a higher priority, or when the container itself is not
// known; else 0. A pure function of its input.
func Switches(cs []ComputeState) map[string]uint32 {
	out := make(map[string]uint32, len(cs))
	for i, c := range cs {
		out[c.Key] = 0
		if !c.Known {
			out[c.Key] = 1
			continue
		}
		for j, o := range cs {
			if i != j && o.Active && (!o.Known || o.Priority <= c.Priority) && shareGPU(c.GPUs, o.GPUs) {
				out[c.Key] = 1
				break
			}
		}
	}
	return out
}

func shareGPU(a, b []string) bool {
	if a == nil || b == nil {
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
