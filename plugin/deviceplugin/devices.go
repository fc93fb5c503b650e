package deviceplugin

import (
	"strconv"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/gpu"
)

// virtualDevices splits every GPU into split devices "<uuid>-<n>", as HAMi
// advertises them; MIG devices are advertised one to one. IDs depend only
// on the hardware, so kubelet's checkpointed allocations stay valid across
// plugin restarts. physical maps each ID to its GPU or MIG UUID.
func virtualDevices(devs []gpu.Device, split uint) (list []*pluginapi.Device, physical map[string]string) {
	physical = map[string]string{}
	for _, d := range devs {
		if d.MIG {
			list = append(list, &pluginapi.Device{ID: d.UUID, Health: pluginapi.Healthy})
			physical[d.UUID] = d.UUID
			continue
		}
		for n := uint(0); n < split; n++ {
			id := d.UUID + "-" + strconv.FormatUint(uint64(n), 10)
			list = append(list, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
			physical[id] = d.UUID
		}
	}
	return list, physical
}

// preferred picks size IDs from available: must-include first, then one
// replica per GPU not yet used (a container's devices must be distinct
// GPUs), in advertised order.
func preferred(available, mustInclude []string, size int, physical map[string]string) []string {
	out := []string{}
	used := map[string]bool{}
	taken := map[string]bool{}
	for _, id := range mustInclude {
		if len(out) == size {
			break
		}
		out = append(out, id)
		used[physical[id]] = true
		taken[id] = true
	}
	for _, id := range available {
		if len(out) == size {
			break
		}
		if taken[id] || used[physical[id]] {
			continue
		}
		out = append(out, id)
		used[physical[id]] = true
		taken[id] = true
	}
	return out
}
