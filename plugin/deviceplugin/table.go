package deviceplugin

import (
	"math"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/pods"
)

// maxDeviceListBytes keeps ListAndWatch's message well below the 4 MiB a
// gRPC client (the kubelet) accepts by default.
const maxDeviceListBytes = 2 << 20

// listSize is the encoded size of a ListAndWatch response carrying list.
func listSize(list []*pluginapi.Device) int {
	return proto.Size(&pluginapi.ListAndWatchResponse{Devices: list})
}

// registeredMemory is each device's memory as HAMi registers it: a GPU's MiB
// times deviceMemoryScaling (rounded down), a MIG device's own MiB. A lost
// GPU's memory is unknown (0): no placement on it can be checked.
func registeredMemory(devs []gpu.Device, scaling float64) map[string]int64 {
	if !(scaling > 0) {
		scaling = 1
	}
	out := map[string]int64{}
	for _, d := range devs {
		mib := float64(d.MemoryMiB)
		if !d.MIG {
			mib *= scaling
		}
		out[d.UUID] = int64(math.Min(mib, math.MaxInt32))
	}
	return out
}

// capacity answers podrequest's question: the registered memory of uuid.
func (p *Plugin) capacity(uuid string) (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.memMiB[uuid]
	return m, ok && m > 0
}

// maxRefused bounds the memory of refused pods; each is also marked
// bind-phase=failed on the API server, this is only the second record.
const maxRefused = 4096

// remember records that pod was refused as a contender.
func (p *Plugin) remember(pod *corev1.Pod) {
	p.refusedMu.Lock()
	defer p.refusedMu.Unlock()
	if len(p.refused) >= maxRefused {
		clear(p.refused)
	}
	p.refused[pod.UID] = true
}

// unrefused drops the contenders already refused: each had its one call
// refused, and keeps being refused whatever it writes on itself.
func (p *Plugin) unrefused(cs []pods.Contender) []pods.Contender {
	p.refusedMu.Lock()
	defer p.refusedMu.Unlock()
	var out []pods.Contender
	for _, c := range cs {
		if !p.refused[c.Pod.UID] {
			out = append(out, c)
		}
	}
	return out
}
