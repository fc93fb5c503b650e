// Package allocate turns a pod's devices and the node configuration into a
// kubelet ContainerAllocateResponse. Allocate is one straight path
// (allocate.go) through one file per concern: the request's devices
// (devices.go), the library's variables (libenv.go), the container spec's
// switches (containerspec.go), the host paths (paths.go), the mounts
// (mounts.go), the compute scheduler's grant (grant.go), the limits file
// (limits.go), the test bed's fake driver (fakedriver.go) and the HAMi v2.10
// compatibility profile (compat.go).
//
// An Allocator is safe for concurrent use for different containers; the
// host files it touches are per container.
package allocate

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/paths"
)

// Options configure an Allocator.
type Options struct {
	// HookPath is the host install root; files live under <HookPath>/vgpu.
	HookPath string
	// LockDir is the host directory mounted at /tmp/vgpulock under the
	// hami-v2.10 profile (the current library does not use it); "" skips it.
	LockDir          string
	Profile          Profile
	OperatingMode    v1.OperatingMode
	Oversubscribe    bool // CUDA_OVERSUBSCRIBE=true (deviceMemoryScaling > 1)
	LibCudaLogLevel  string
	DisableCoreLimit bool
	HostPIDBroker    bool
	// ComputeScheduler: vgpu-scheduler runs on the node; each container gets its grant file.
	ComputeScheduler bool
	FakeDriver       *FakeDriver
	// FS is the limits file's filesystem seam; nil means the real one.
	FS limitsfile.FS
	// NewUUID names the v2.10 profile's cache; nil means random UUIDs.
	NewUUID func() string
}

// Allocator builds allocation responses.
type Allocator struct {
	opts      Options
	publisher limitsfile.Publisher
	newUUID   func() string
}

// New returns an Allocator.
func New(opts Options) (*Allocator, error) {
	if opts.HookPath == "" {
		return nil, fmt.Errorf("allocate: hook path is required")
	}
	if opts.Profile == "" {
		opts.Profile = ProfileCurrent
	}
	if _, err := ParseProfile(string(opts.Profile)); err != nil {
		return nil, err
	}
	if opts.OperatingMode == "" {
		opts.OperatingMode = v1.OperatingModeHAMiCore
	}
	a := &Allocator{opts: opts, publisher: limitsfile.Publisher{FS: opts.FS}, newUUID: opts.NewUUID}
	if a.newUUID == nil {
		a.newUUID = randomUUID
	}
	return a, nil
}

// MIGMode reports a node in operatingmode mig: the scheduler's annotation
// then names MIG instances, not the GPUs kubelet's IDs stand for.
func (a *Allocator) MIGMode() bool { return a.opts.OperatingMode == v1.OperatingModeMIG }

// Profile returns the compatibility profile in force.
func (a *Allocator) Profile() Profile { return a.opts.Profile }

// Request is one container's allocation.
type Request struct {
	Pod       *corev1.Pod
	Container *corev1.Container
	// Devices from hami.io/vgpu-devices-to-allocate for this container.
	Devices annotations.ContainerDevices
	// DeviceIDs are the IDs kubelet asked for.
	DeviceIDs []string
	// UUIDs are the GPUs or MIG devices behind DeviceIDs, from the plugin's
	// device table. NVIDIA_VISIBLE_DEVICES names them; Devices must name the
	// same GPUs. Never taken from a placement.
	UUIDs []string
	// Delivery is the resolved limitDelivery (see package delivery).
	Delivery v1.LimitDelivery
	// MIG is set when the caller's device table says DeviceIDs are MIG
	// devices (kubelet's static MIG resources).
	MIG bool
}

// IsMIG reports whether the request gets MIG treatment: the node runs in
// MIG mode or the request is for MIG devices.
func (a *Allocator) IsMIG(req Request) bool {
	return a.opts.OperatingMode == v1.OperatingModeMIG || req.MIG
}

// Allocate builds the response for one container and performs its host
// side effects (cache dir, limits file).
func (a *Allocator) Allocate(req Request) (*pluginapi.ContainerAllocateResponse, error) {
	resp, err := a.allocate(req)
	if err != nil {
		return nil, fmt.Errorf("allocate pod %s/%s container %s: %w", podNS(req.Pod), podName(req.Pod), ctrName(req.Container), err)
	}
	return resp, nil
}

// allocate is the request's one path through the package: check it, name its
// host files, then build what the container gets in order: its environment
// (libenv.go, devices.go), its mounts (mounts.go, fakedriver.go, grant.go)
// and, last, once the environment is final, its limits file (limits.go).
func (a *Allocator) allocate(req Request) (*pluginapi.ContainerAllocateResponse, error) {
	// Checked before the pod and container: kubelet's static MIG resources
	// are not scheduled by HAMi and have no container entry.
	if a.IsMIG(req) {
		return a.allocateMIG(req)
	}
	if err := checkDevices(req); err != nil {
		return nil, err
	}
	key, err := paths.ContainerKey(string(req.Pod.UID), req.Container.Name)
	if err != nil {
		return nil, fmt.Errorf("unsafe container directory name: %w", err)
	}
	p := a.paths(key)
	disabled := controlDisabled(req.Container)

	env := a.libraryEnv(req)
	resp := &pluginapi.ContainerAllocateResponse{Envs: maps.Clone(env)}
	resp.Envs[EnvVisibleDevices] = visibleDevices(uuids(req.Devices))

	a.libraryMounts(resp, p, disabled)
	if err := a.cacheDirMount(resp, p); err != nil {
		return nil, err
	}
	if err := a.lockDirMount(resp); err != nil {
		return nil, err
	}
	a.fakeDriverMounts(resp)
	if a.opts.ComputeScheduler && a.opts.Profile != ProfileHAMiV210 && !disabled {
		if err := a.grantMount(resp, key, req.Devices); err != nil {
			return nil, err
		}
	}

	if err := a.deliverLimits(resp, p, req, env); err != nil {
		return nil, err
	}
	return resp, nil
}

// allocateMIG answers a MIG request. MIG isolation is the hardware's: no HAMi
// variables, no libvgpu or preload, hence nothing to write. The device is the
// kubelet's, as the device table names it; a placement never chooses it.
func (a *Allocator) allocateMIG(req Request) (*pluginapi.ContainerAllocateResponse, error) {
	if len(req.UUIDs) == 0 || len(req.UUIDs) != len(req.DeviceIDs) {
		return nil, fmt.Errorf("MIG request for %v without the device table's identities of those devices", req.DeviceIDs)
	}
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{EnvVisibleDevices: visibleDevices(req.UUIDs)}}
	a.fakeDriverMounts(resp)
	return resp, nil
}

func podNS(p *corev1.Pod) string {
	if p == nil {
		return "?"
	}
	return p.Namespace
}

func podName(p *corev1.Pod) string {
	if p == nil {
		return "?"
	}
	return p.Name
}

func ctrName(c *corev1.Container) string {
	if c == nil {
		return "?"
	}
	return c.Name
}
