package annotations

import (
	"fmt"
	"strconv"
	"strings"
)

// Separators of the device string (HAMi's encoding):
// per device "UUID,Type,Usedmem,Usedcores" followed by ":", per container
// entry the devices followed by ";". Example, two containers on one card:
// "GPU-0fc3,NVIDIA,3000,30:;GPU-0fc3,NVIDIA,5000,0:;".
const (
	fieldSep     = ","
	deviceSep    = ":"
	containerSep = ";"
)

// ContainerDevice is one (virtual) device assigned to a container.
type ContainerDevice struct {
	UUID string
	Type string // e.g. "NVIDIA"
	// UsedMem is the memory limit in MiB.
	UsedMem int32
	// UsedCores is the core limit in percent; 0 means no limit.
	UsedCores int32
}

// ContainerDevices are the devices of one container, in allocation order:
// index i becomes CUDA_DEVICE_MEMORY_LIMIT_<i>.
type ContainerDevices []ContainerDevice

// PodDevices has one entry per container, init containers first, then
// regular containers. Empty entries are kept so that indices line up.
type PodDevices []ContainerDevices

// Encode renders p in HAMi's format.
func (p PodDevices) Encode() string {
	var b strings.Builder
	for _, c := range p {
		for _, d := range c {
			b.WriteString(d.UUID + fieldSep + d.Type + fieldSep +
				strconv.FormatInt(int64(d.UsedMem), 10) + fieldSep +
				strconv.FormatInt(int64(d.UsedCores), 10) + deviceSep)
		}
		b.WriteString(containerSep)
	}
	return b.String()
}

// DecodePodDevices parses HAMi's device string. Each device needs at least
// four comma-separated fields; extra fields are ignored, as upstream does.
func DecodePodDevices(s string) (PodDevices, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, containerSep)
	// A well-formed string ends with ";": the element after it is not a
	// container.
	if parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	out := make(PodDevices, 0, len(parts))
	for ci, part := range parts {
		var devs ContainerDevices
		for _, ds := range strings.Split(part, deviceSep) {
			if ds == "" {
				continue
			}
			d, err := decodeDevice(ds)
			if err != nil {
				return nil, fmt.Errorf("decode %s: container entry %d: %w", DevicesToAllocate, ci, err)
			}
			devs = append(devs, d)
		}
		out = append(out, devs)
	}
	return out, nil
}

func decodeDevice(s string) (ContainerDevice, error) {
	f := strings.Split(s, fieldSep)
	if len(f) < 4 {
		return ContainerDevice{}, fmt.Errorf("device %q has %d fields, want UUID,Type,Usedmem,Usedcores", s, len(f))
	}
	if f[0] == "" {
		return ContainerDevice{}, fmt.Errorf("device %q has an empty UUID", s)
	}
	mem, err := strconv.ParseInt(f[2], 10, 32)
	if err != nil || mem < 0 {
		return ContainerDevice{}, fmt.Errorf("device %q: Usedmem %q is not a non-negative integer", s, f[2])
	}
	cores, err := strconv.ParseInt(f[3], 10, 32)
	if err != nil || cores < 0 {
		return ContainerDevice{}, fmt.Errorf("device %q: Usedcores %q is not a non-negative integer", s, f[3])
	}
	return ContainerDevice{UUID: f[0], Type: f[1], UsedMem: int32(mem), UsedCores: int32(cores)}, nil
}

// Next returns the index and devices of the first container entry that
// still has devices; ok is false when none is left.
func (p PodDevices) Next() (idx int, devs ContainerDevices, ok bool) {
	for i, c := range p {
		if len(c) > 0 {
			return i, c, true
		}
	}
	return -1, nil, false
}

// Erase returns a copy of p with entry idx emptied.
func (p PodDevices) Erase(idx int) PodDevices {
	out := make(PodDevices, len(p))
	copy(out, p)
	if idx >= 0 && idx < len(out) {
		out[idx] = nil
	}
	return out
}

// Pending reports whether any container entry still has devices.
func (p PodDevices) Pending() bool {
	_, _, ok := p.Next()
	return ok
}
