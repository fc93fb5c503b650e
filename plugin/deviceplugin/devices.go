package deviceplugin

import (
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/identity"
)

// virtualDevices splits every GPU into split devices "<uuid>-<n>"
// (identity.DeviceID, whose DeviceUUID node components read them back), as HAMi
// advertises them; MIG devices are advertised one to one. IDs depend only
// on the hardware, so kubelet's checkpointed allocations stay valid across
// plugin restarts. physical maps each ID to its GPU or MIG UUID, board to
// the UUID of the GPU whose health it shares (the parent of a MIG device).
// A lost GPU is advertised, split as any other, but Unhealthy.
func virtualDevices(devs []gpu.Device, split uint) (list []*pluginapi.Device, physical, board map[string]string) {
	physical, board = map[string]string{}, map[string]string{}
	for _, d := range devs {
		health := pluginapi.Healthy
		if d.Lost {
			health = pluginapi.Unhealthy
		}
		if d.MIG {
			list = append(list, &pluginapi.Device{ID: d.UUID, Health: health})
			physical[d.UUID], board[d.UUID] = d.UUID, d.Parent
			continue
		}
		for n := uint(0); n < split; n++ {
			id := identity.DeviceID(d.UUID, n)
			list = append(list, &pluginapi.Device{ID: id, Health: health})
			physical[id], board[id] = d.UUID, d.UUID
		}
	}
	return list, physical, board
}

// migIDs returns the advertised IDs that are MIG devices (one ID each).
func migIDs(devs []gpu.Device) map[string]bool {
	out := map[string]bool{}
	for _, d := range devs {
		if d.MIG {
			out[d.UUID] = true
		}
	}
	return out
}

// boards returns the UUIDs of the GPUs of devs (a MIG device's parent),
// each once, in order: what the health watch looks at.
func boards(devs []gpu.Device) []string {
	var out []string
	seen := map[string]bool{}
	for _, d := range devs {
		u := d.UUID
		if d.MIG {
			u = d.Parent
		}
		if !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	return out
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
