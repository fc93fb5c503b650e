// Package annotations is the HAMi pod annotation protocol between the
// scheduler and the device plugin: keys, bind phases and the
// hami.io/vgpu-devices-to-allocate codec.
package annotations

// Annotation keys, as HAMi spells them.
const (
	// DevicesToAllocate holds the devices still to be handed to containers;
	// the plugin empties each container's entry once it is allocated.
	DevicesToAllocate = "hami.io/vgpu-devices-to-allocate"
	// DevicesAllocated holds the scheduler's full decision; never erased.
	DevicesAllocated = "hami.io/vgpu-devices-allocated"
	// VGPUNode is the node the scheduler chose.
	VGPUNode = "hami.io/vgpu-node"
	// VGPUTime is the unix time (seconds) of the scheduler's decision.
	VGPUTime = "hami.io/vgpu-time"
	// MIGAllocations is the MIG instances HAMi's scheduler and plugin
	// record for a pod in MIG mode (JSON); this plugin does not write it.
	MIGAllocations = "hami.io/vgpu-mig-allocations"
	// BindPhase is the allocation state machine (see Phase).
	BindPhase = "hami.io/bind-phase"
	// BindTime is the unix time (seconds) the scheduler bound the pod.
	BindTime = "hami.io/bind-time"
	// LimitDelivery is the per-pod delivery override: "file" or "env".
	LimitDelivery = "hami.io/limit-delivery"
	// NodeLock is the node annotation the scheduler sets while it binds a
	// pod to the node: "<RFC3339>,<namespace>,<podName>".
	NodeLock = "hami.io/mutex.lock"
	// NodeRegister is the node annotation HAMi's device plugin publishes its
	// devices in (JSON); this plugin does not write it (the harness's
	// wire-protocol plugin does).
	NodeRegister = "hami.io/node-nvidia-register"
)

// PlacementKeys make up the scheduler's placement of a pod. Only the
// scheduler, and the device plugin handing the entries out, may write them:
// the chart's admission policy refuses them from anyone else, and the plugin
// holds every placement to the pod's own requests (docs/trust-model.md).
var PlacementKeys = []string{VGPUNode, VGPUTime, DevicesToAllocate, DevicesAllocated, MIGAllocations, BindPhase, BindTime}

// Phase is a value of BindPhase.
type Phase string

// Bind phases.
const (
	PhaseAllocating Phase = "allocating"
	PhaseSuccess    Phase = "success"
	PhaseFailed     Phase = "failed"
)
