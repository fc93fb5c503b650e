package allocate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/limitbed/limitbed/plugin/annotations"
	"github.com/limitbed/limitbed/plugin/libvars"
)

// EnvVisibleDevices names the container's GPUs to the container toolkit.
const EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"

// checkDevices holds a request's placement to what the library can limit and
// to the GPUs the kubelet allocated: a placement never picks another GPU.
func checkDevices(req Request) error {
	if req.Pod == nil || req.Container == nil {
		return fmt.Errorf("request without pod or container")
	}
	if len(req.Devices) == 0 {
		return fmt.Errorf("no devices assigned")
	}
	if len(req.Devices) > libvars.Devices {
		return fmt.Errorf("%d devices in one container, but libvgpu.so limits at most %d (%s_0..%d): devices past that would run unlimited; ask for at most %d",
			len(req.Devices), libvars.Devices, libvars.MemoryLimit, libvars.Devices-1, libvars.Devices)
	}
	if req.UUIDs != nil && !sameGPUs(uuids(req.Devices), req.UUIDs) {
		return fmt.Errorf("the placement names %v, but the kubelet allocated %v: refusing another GPU", uuids(req.Devices), req.UUIDs)
	}
	return nil
}

// visibleDevices returns NVIDIA_VISIBLE_DEVICES: the unique IDs, in order.
func visibleDevices(ids []string) string {
	seen := map[string]bool{}
	var out []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return strings.Join(out, ",")
}

// sameGPUs reports whether a and b name the same devices as many times.
func sameGPUs(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func uuids(devs annotations.ContainerDevices) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.UUID
	}
	return out
}
