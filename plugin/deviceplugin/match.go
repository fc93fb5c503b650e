package deviceplugin

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
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

// match is the pod an Allocate call belongs to: its device entries, taken in
// order, hold exactly the GPUs kubelet asked for.
type match struct {
	pod  *corev1.Pod
	devs annotations.PodDevices
}

// matchPod tries the candidates in order (node lock first, then oldest) and
// returns the first whose next container entries name the same GPUs, as
// many times, as kubelet's non-MIG requests. Replicas of one GPU are
// indistinguishable, so two pods waiting on the same GPUs are told apart
// only by that order, which the scheduler's node lock makes the right one.
// When nothing matches, the error names every candidate and what it waits
// for; the second result is the only candidate when there was just one
// (it is then marked failed, as upstream does on a device mismatch).
//
// countOnly (a node in MIG operating mode, where the annotation names MIG
// instances rather than the GPUs behind kubelet's IDs) compares counts only.
func matchPod(cands []*corev1.Pod, reqs []request, countOnly bool) (match, *corev1.Pod, error) {
	var why []string
	for _, pod := range cands {
		devs, err := annotations.DecodePodDevices(pod.Annotations[annotations.DevicesToAllocate])
		if err != nil {
			why = append(why, fmt.Sprintf("pod %s/%s: %v", pod.Namespace, pod.Name, err))
			continue
		}
		if reason := entriesMatch(devs, reqs, countOnly); reason != "" {
			why = append(why, fmt.Sprintf("pod %s/%s: %s", pod.Namespace, pod.Name, reason))
			continue
		}
		return match{pod: pod, devs: devs}, nil, nil
	}
	var only *corev1.Pod
	if len(cands) == 1 {
		only = cands[0]
	}
	return match{}, only, fmt.Errorf("kubelet's devices %s match no allocating pod on this node: %s", describe(reqs), strings.Join(why, "; "))
}

func entriesMatch(devs annotations.PodDevices, reqs []request, countOnly bool) string {
	for _, r := range reqs {
		if r.mig {
			continue // static MIG resources have no annotation entry
		}
		idx, entry, ok := devs.Next()
		if !ok {
			return "no container entry left in " + annotations.DevicesToAllocate
		}
		if len(entry) != len(r.ids) {
			return fmt.Sprintf("device number not matched: %d scheduled (%s), kubelet asked for %d", len(entry), entryUUIDs(entry), len(r.ids))
		}
		if countOnly {
			devs = devs.Erase(idx)
			continue
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
		devs = devs.Erase(idx)
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

func describe(reqs []request) string {
	var parts []string
	for _, r := range reqs {
		parts = append(parts, fmt.Sprintf("%v (%v)", r.ids, r.uuids))
	}
	return strings.Join(parts, ", ")
}
