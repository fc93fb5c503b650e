package identity

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/limitbed/limitbed/plugin/annotations"
	"github.com/limitbed/limitbed/plugin/internal/safefile"
	"github.com/limitbed/limitbed/plugin/limitsfile"
)

// DefaultResourceName is the resource whose devices are GPUs.
const DefaultResourceName = "nvidia.com/gpu"

// Sources are where a Snapshot comes from.
type Sources struct {
	// Pods lists the node's pods (the API server). Required.
	Pods PodSource
	// Devices is the kubelet's pod-resources API; nil: not asked, GPUs then
	// come from the scheduler's placement.
	Devices DeviceSource
	// ResourceName is the GPU resource (DefaultResourceName when empty).
	ResourceName string
	// ContainersDir is <HOOK_PATH>/vgpu/containers, where the limits files
	// are; empty: none are read.
	ContainersDir string
	// KnownGPUs are the UUIDs the node's driver lists (GPUs and MIG
	// devices); nil: device IDs are read by their shape.
	KnownGPUs map[string]bool
	Now       func() time.Time
}

// Snapshot reads every source once. It fails only when the API server
// cannot be read (no pod, hence no container, is known); a kubelet that does
// not answer, or a limits file that cannot be read, leaves the fields it
// would have given unknown, with a warning.
func (s *Sources) Snapshot(ctx context.Context) (*Snapshot, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	taken := now()
	pods, err := s.Pods.NodePods(ctx)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	var warnings []string
	resource := s.ResourceName
	if resource == "" {
		resource = DefaultResourceName
	}
	kubelet := map[string][]string{} // ns/pod/container -> device IDs
	asked := s.Devices != nil
	if asked {
		devs, err := s.Devices.ContainerDevices(ctx)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("the kubelet's devices are unknown: %v", err))
			asked = false
		}
		for _, d := range devs {
			if d.Resource == resource {
				k := d.Namespace + "/" + d.Pod + "/" + d.Container
				kubelet[k] = append(kubelet[k], d.DeviceIDs...)
			}
		}
	}
	var cs []*Container
	for i := range pods {
		pcs, w := s.podContainers(&pods[i], kubelet, asked)
		cs = append(cs, pcs...)
		warnings = append(warnings, w...)
	}
	return newSnapshot(taken, cs, warnings), nil
}

// podContainers builds the containers of one pod.
func (s *Sources) podContainers(p *corev1.Pod, kubelet map[string][]string, asked bool) ([]*Container, []string) {
	var warnings []string
	pod := Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
	placed, err := annotations.DecodePodDevices(p.Annotations[annotations.DevicesAllocated])
	if err != nil {
		warnings = append(warnings, fmt.Sprintf("pod %s: %s: %v", pod, annotations.DevicesAllocated, err))
		placed = nil
	}
	ids := containerIDs(p)
	// Placement entries are init containers first, then the others, as the scheduler writes them.
	specs := append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...)
	var out []*Container
	for i := range specs {
		spec := &specs[i]
		c := &Container{Key: Key{PodUID: p.UID, Container: spec.Name}, Pod: pod, ID: ids[spec.Name]}
		var entry annotations.ContainerDevices
		if i < len(placed) {
			entry = placed[i]
		}
		if w := s.gpus(c, kubelet[pod.Namespace+"/"+pod.Name+"/"+spec.Name], asked, entry); w != "" {
			warnings = append(warnings, w)
		}
		if w := s.limits(c, entry, spec); w != "" {
			warnings = append(warnings, w)
		}
		out = append(out, c)
	}
	for _, e := range p.Spec.EphemeralContainers { // no devices; known for their processes
		out = append(out, &Container{Key: Key{PodUID: p.UID, Container: e.Name}, Pod: pod, ID: ids[e.Name], GPUSource: SourceKubelet, Ordered: true})
	}
	return out, warnings
}

// gpus fills the container's GPUs from the kubelet's device IDs (the
// trusted set), ordered as the scheduler placed them when that placement
// names the same GPUs; without a kubelet answer, from the placement.
func (s *Sources) gpus(c *Container, devIDs []string, asked bool, entry annotations.ContainerDevices) string {
	if !asked {
		for _, d := range entry {
			c.GPUs = append(c.GPUs, GPU{UUID: d.UUID})
		}
		c.GPUSource, c.Ordered = SourceAnnotation, true
		if len(entry) == 0 {
			c.GPUSource = SourceNone
		}
		c.MIG = isMIG(c.GPUs)
		return ""
	}
	c.GPUSource = SourceKubelet
	for _, id := range devIDs {
		u, ok := DeviceUUID(id, s.KnownGPUs)
		if !ok {
			c.GPUs, c.GPUSource = nil, SourceNone
			return fmt.Sprintf("container %s: the kubelet's device %q is not a GPU of this node; its GPUs are unknown", c.Key, id)
		}
		if j := c.GPUIndex(u); j >= 0 {
			c.GPUs[j].DeviceIDs = append(c.GPUs[j].DeviceIDs, id)
			continue
		}
		c.GPUs = append(c.GPUs, GPU{UUID: u, DeviceIDs: []string{id}})
	}
	c.MIG = isMIG(c.GPUs)
	c.Ordered = len(c.GPUs) <= 1
	order := make([]string, 0, len(entry))
	for _, d := range entry {
		if !slices.Contains(order, d.UUID) {
			order = append(order, d.UUID)
		}
	}
	if len(order) == len(c.GPUs) && !c.Ordered {
		sorted := make([]GPU, 0, len(order))
		for _, u := range order {
			j := c.GPUIndex(u)
			if j < 0 {
				return ""
			}
			sorted = append(sorted, c.GPUs[j])
		}
		c.GPUs, c.Ordered = sorted, true
	}
	return ""
}

// limits reads the container's limits file; without one (env mode), the
// placement's limits; with none of either, none are known.
func (s *Sources) limits(c *Container, entry annotations.ContainerDevices, spec *corev1.Container) string {
	if s.ContainersDir != "" && !strings.ContainsAny(c.Key.String(), "/\x00") {
		l, err := ReadLimits(filepath.Join(s.ContainersDir, c.Key.String()+limitsfile.Suffix))
		var fe *safefile.Error
		switch {
		case err == nil:
			c.Limits = l
			return ""
		case !errors.As(err, &fe) || fe.Reason != safefile.ReasonMissing:
			c.Limits = Limits{Source: SourceUnreadable}
			return fmt.Sprintf("container %s: %v", c.Key, err)
		}
	}
	if len(entry) > 0 && !isMIG(c.GPUs) {
		c.Limits = placedLimits(entry, spec)
	}
	return ""
}

func isMIG(gs []GPU) bool {
	return len(gs) > 0 && slices.ContainsFunc(gs, func(g GPU) bool { return strings.HasPrefix(g.UUID, "MIG-") })
}

// containerIDs maps container names to their runtime IDs from the pod's
// status ("containerd://<id>" → "<id>").
func containerIDs(p *corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for _, st := range list {
			if _, id, ok := strings.Cut(st.ContainerID, "://"); ok && id != "" {
				out[st.Name] = id
			}
		}
	}
	return out
}
