package monitor

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

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
	GPUs [][uuidBytes]byte
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

func shareGPU(a, b [][uuidBytes]byte) bool {
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

// regionCompute is the compute part of a region header.
type regionCompute struct {
	Priority     int32
	Policy       uint32
	UtilSwitch   uint32
	RecentKernel uint32
	GPUs         [][uuidBytes]byte
}

// decodeCompute reads the compute fields of a region header (the first
// regionHeaderSize bytes of a usage.cache, layout in region.h).
func decodeCompute(b []byte) (regionCompute, error) {
	ne := binary.NativeEndian
	if len(b) < regionHeaderSize {
		return regionCompute{}, fmt.Errorf("%w: header is %d bytes, want %d", ErrNotRegion, len(b), regionHeaderSize)
	}
	switch m := ne.Uint64(b[offMagic:]); m {
	case regionMagic:
	case 0:
		return regionCompute{}, fmt.Errorf("%w: not initialised yet (magic 0)", ErrNotRegion)
	case bits.ReverseBytes64(regionMagic):
		return regionCompute{}, fmt.Errorf("%w: written on a machine of the other byte order", ErrNotRegion)
	default:
		return regionCompute{}, fmt.Errorf("%w: magic %#x", ErrNotRegion, m)
	}
	if v := ne.Uint32(b[offVersion:]); v != regionVersion {
		return regionCompute{}, fmt.Errorf("%w: version %d (supported: %v)", ErrUnsupportedVersion, v, SupportedRegionVersions)
	}
	rc := regionCompute{
		Priority:     int32(ne.Uint32(b[offPriority:])),
		Policy:       ne.Uint32(b[offPolicy:]),
		UtilSwitch:   ne.Uint32(b[offUtilSwitch:]),
		RecentKernel: ne.Uint32(b[offRecentKernel:]),
	}
	var zero [uuidBytes]byte
	for d := 0; d < regionMaxDevices; d++ {
		var u [uuidBytes]byte
		copy(u[:], b[offDevUUID+d*uuidBytes:])
		if u != zero {
			rc.GPUs = append(rc.GPUs, u)
		}
	}
	return rc, nil
}
