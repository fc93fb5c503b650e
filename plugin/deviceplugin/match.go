package deviceplugin

import (
	"fmt"
	"slices"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/annotations"
)

// request is one container request of an Allocate call, classified with
// the plugin's own device table (never by the shape of an ID).
type request struct {
	ids   []string // kubelet's device IDs
	uuids []string // the GPU or MIG device behind each ID
	mig   bool     // every ID is a MIG device this plugin advertises
}

// classify maps kubelet's IDs through the device table. An ID the plugin
// does not advertise, or a mix of MIG and GPU devices in one request, fails
// the allocation: a device the plugin cannot classify would otherwise get
// no libvgpu.so, hence no limit.
func (p *Plugin) classify(crs []*pluginapi.ContainerAllocateRequest) ([]request, error) {
	p.mu.Lock()
	physical, mig := p.physical, p.mig
	p.mu.Unlock()
	out := make([]request, 0, len(crs))
	for _, cr := range crs {
		r := request{ids: cr.DevicesIds}
		if len(cr.DevicesIds) == 0 {
			return nil, fmt.Errorf("kubelet asked for a container with no device IDs")
		}
		kinds := map[bool]bool{}
		for _, id := range cr.DevicesIds {
			u, ok := physical[id]
			if !ok {
				return nil, fmt.Errorf("device ID %q is not one this plugin advertises (%d devices); refusing it rather than handing out a device without a limit", id, len(physical))
			}
			r.uuids = append(r.uuids, u)
			kinds[mig[id]] = true
		}
		if len(kinds) > 1 {
			return nil, fmt.Errorf("device IDs %v mix MIG devices and GPUs in one container; refusing them", cr.DevicesIds)
		}
		r.mig = kinds[true]
		out = append(out, r)
	}
	return out, nil
}

// entryMatches returns why a placement entry does not name the devices the
// kubelet allocated (the same GPUs or MIG devices, as many times), or "".
// Replicas of one GPU are indistinguishable: the GPU is what must match.
func entryMatches(entry annotations.ContainerDevices, r request) string {
	if len(entry) != len(r.ids) {
		return fmt.Sprintf("device number not matched: %d scheduled (%s), kubelet asked for %d", len(entry), entryUUIDs(entry), len(r.ids))
	}
	want := make([]string, len(entry))
	for i, d := range entry {
		want[i] = d.UUID
	}
	got := slices.Clone(r.uuids)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		return fmt.Sprintf("devices not matched: scheduled %s, kubelet asked for %v", entryUUIDs(entry), r.uuids)
	}
	return ""
}

func entryUUIDs(entry annotations.ContainerDevices) string {
	u := make([]string, len(entry))
	for i, d := range entry {
		u[i] = d.UUID
	}
	return fmt.Sprint(u)
}
