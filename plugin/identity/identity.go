// Package identity is the node's trusted view of its containers: for every
// container on the node, its pod (namespace, name, UID), its name, the
// physical GPUs it holds (in its device order, MIG devices included) and its
// limits (memory per GPU, compute limit, policy, priority); and, for any host
// process, the container it runs in.
//
// Everything comes from sources the container cannot write: the plugin's own
// records (the root-owned limits file <HOOK_PATH>/vgpu/containers/
// <podUID>_<ctr>.limits), the kubelet (the pod-resources API: which devices a
// container was given) and the API server (pod UID, container IDs, the
// scheduler's placement). A process is mapped through its cgroup, which the
// runtime sets (pod UID and container ID), then the container ID through the
// pod's status, as the kubelet, cAdvisor and dcgm-exporter do. Nothing is
// taken from a container's usage region, environment or files.
//
// A Snapshot is built once per period (Sources.Snapshot) and answers lookups
// without I/O; reading a process (ReadProcess) reads three bounded /proc files.
package identity

import (
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/limitbed/limitbed/plugin/limitsfile"
)

// Key names a container on the node: "<podUID>_<container>" is the name of
// its cache directory and, with ".limits", of its limits file.
type Key struct {
	PodUID    types.UID
	Container string
}

func (k Key) String() string { return string(k.PodUID) + "_" + k.Container }

// Pod identifies a pod, from the API server.
type Pod struct {
	Namespace string
	Name      string
	UID       types.UID
}

func (p Pod) String() string { return p.Namespace + "/" + p.Name }

// GPU is one device a container holds.
type GPU struct {
	// UUID is the physical GPU's UUID, or the MIG device's own UUID.
	UUID string
	// DeviceIDs are the kubelet device IDs that stand for it: "<uuid>-<n>"
	// replicas of a shared GPU, or the MIG UUID itself.
	DeviceIDs []string
}

// Source says where a piece of a container's identity came from.
type Source string

// Sources of GPUs and limits.
const (
	SourceNone       Source = ""           // not known
	SourceKubelet    Source = "kubelet"    // pod-resources API
	SourceAnnotation Source = "annotation" // hami.io/vgpu-devices-allocated (the scheduler's placement, API server)
	SourceFile       Source = "file"       // the plugin's limits file
	SourceUnreadable Source = "unreadable" // the limits file exists but could not be read: judge nothing by it
)

// Limits are what a container's library enforces (file mode: the limits
// file resolved as libvgpu.so resolves it, limitsfile.Resolve) or, without a
// file (env mode), what the scheduler placed (hami.io/vgpu-devices-allocated:
// memory per device, compute limit of the first) with the pod spec's policy
// and priority.
type Limits struct {
	Source Source
	// Memory is each device's limit in bytes by device index (CUDA ordinal):
	// limitsfile.Unlimited for none, 0 when every allocation is refused.
	Memory []uint64
	// SM is the compute limit in percent of the first device (1..100; 100: none).
	SM       uint32
	Policy   string // limitsfile.PolicyDefault, PolicyForce or PolicyDisable
	Priority int32  // CUDA_TASK_PRIORITY: lower is higher
}

// Container is one container of a pod on the node.
type Container struct {
	Key
	Pod Pod
	// ID is the runtime's container ID (the pod status's containerID without
	// its "containerd://" scheme); "" before the container started.
	ID string
	// GPUs in the container's device order: CUDA ordinal i is GPUs[i] and
	// CUDA_DEVICE_MEMORY_LIMIT_<i> limits it. Empty: it holds no GPU, or
	// GPUSource is SourceNone (not known: a caller must assume any GPU).
	GPUs      []GPU
	GPUSource Source
	// Ordered is false when the GPUs' order could not be established (the
	// kubelet's set did not match the scheduler's placement): per-device
	// limits then apply their strictest value to every GPU.
	Ordered bool
	MIG     bool // its devices are MIG devices (isolated by the hardware, no libvgpu.so)
	Limits  Limits
}

// Holds reports whether the container holds the GPU (or MIG device) uuid.
func (c *Container) Holds(uuid string) bool { return c.GPUIndex(uuid) >= 0 }

// GPUIndex is the device index of uuid in the container, or -1.
func (c *Container) GPUIndex(uuid string) int {
	return slices.IndexFunc(c.GPUs, func(g GPU) bool { return g.UUID == uuid })
}

// MemoryLimit is the container's memory limit on the GPU uuid, in bytes
// (limitsfile.Unlimited: none; 0: every allocation refused). When the GPU's
// index is not certain, the strictest of the container's limits applies.
func (c *Container) MemoryLimit(uuid string) uint64 {
	i := c.GPUIndex(uuid)
	if c.Ordered && i >= 0 && i < len(c.Limits.Memory) {
		return c.Limits.Memory[i]
	}
	strictest := limitsfile.Unlimited
	n := max(len(c.GPUs), 1)
	for j := 0; j < n && j < len(c.Limits.Memory); j++ {
		strictest = min(strictest, c.Limits.Memory[j])
	}
	return strictest
}

// Snapshot is the node's containers at one moment.
type Snapshot struct {
	Taken time.Time
	// Warnings name sources that could not be read in full (e.g. the kubelet
	// did not answer): the affected fields are left unknown, never guessed.
	Warnings []string

	containers []*Container
	byKey      map[Key]*Container
	byID       map[string]*Container
}

func newSnapshot(taken time.Time, cs []*Container, warnings []string) *Snapshot {
	s := &Snapshot{Taken: taken, Warnings: warnings, byKey: map[Key]*Container{}, byID: map[string]*Container{}}
	slices.SortFunc(cs, func(a, b *Container) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	for _, c := range cs {
		s.containers = append(s.containers, c)
		s.byKey[c.Key] = c
		if c.ID != "" {
			s.byID[c.ID] = c
		}
	}
	return s
}

// NewSnapshot builds a snapshot from containers already known (tests, and
// callers with a source of their own).
func NewSnapshot(taken time.Time, cs []*Container) *Snapshot { return newSnapshot(taken, cs, nil) }

// Containers returns every container, sorted by key.
func (s *Snapshot) Containers() []*Container { return s.containers }

// Container returns the container named k.
func (s *Snapshot) Container(k Key) (*Container, bool) {
	c, ok := s.byKey[k]
	return c, ok
}

// ByID returns the container whose runtime ID is id.
func (s *Snapshot) ByID(id string) (*Container, bool) {
	c, ok := s.byID[id]
	return c, ok
}

// Of returns the container process p runs in: the container whose runtime
// ID is the one in p's cgroup, and, when the cgroup also names a pod (the
// kubelet's hierarchy), only if that container belongs to that pod. A
// process of no known container (the host, a pod the API server has not
// reported yet) gives false.
func (s *Snapshot) Of(p Process) (*Container, bool) {
	if p.ContainerID == "" {
		return nil, false
	}
	c, ok := s.byID[p.ContainerID]
	if !ok || (p.PodUID != "" && p.PodUID != c.PodUID) {
		return nil, false
	}
	return c, true
}
