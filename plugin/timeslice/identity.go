// Package timeslice is the per-GPU compute scheduler of the node: it gives the containers that
// share a GPU exclusive time slices in proportion to their compute limits (CUDA_DEVICE_SM_LIMIT),
// as their policies and priorities say, and charges every slice until the container's work of it
// has drained, overruns included (docs/plugin.md, "vgpu-scheduler"). The decisions are a pure
// state machine per GPU (gpu.go, driven by a clock the tests script); the node (node.go: the
// table of containers, containers.go: each one's files and seats, loop.go: one loop per GPU)
// reads the containers' reports and writes their grants through plugin/schedproto.
package timeslice

import (
	"github.com/limitbed/limitbed/plugin/schedproto"
)

// Policy is GPU_CORE_UTILIZATION_POLICY as the container's spec set it.
type Policy string

// The policies (../shared/seeds: "Compute").
const (
	// PolicyDefault limits a container only while another busy container on its GPU has the same
	// or a higher priority.
	PolicyDefault Policy = "default"
	// PolicyForce limits always, even alone (the rest of the time stays idle).
	PolicyForce Policy = "force"
	// PolicyDisable never limits.
	PolicyDisable Policy = "disable"
)

// Identity is what the scheduler knows of a container, from the node's own records (the device
// plugin's limits and grant files, or the node's identity service), never from anything the
// container writes.
type Identity struct {
	Key      string            // <podUID>_<container>, the container's directory name
	GPUs     []schedproto.UUID // in the container's device order
	Limit    int               // percent of each GPU (CUDA_DEVICE_SM_LIMIT); 0 and >= 100: no limit
	Policy   Policy
	Priority int32 // CUDA_TASK_PRIORITY: lower is higher
}

// neverHeld reports a container the scheduler never holds back: disable, or no limit.
func (id Identity) neverHeld() bool {
	return id.Policy == PolicyDisable || id.Limit <= 0 || id.Limit >= 100
}
