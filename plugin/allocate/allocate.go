// Package allocate turns a pod's devices and the node configuration into a
// kubelet ContainerAllocateResponse. Each concern (environment, library
// mounts, cache dir, limits file, MIG, fake driver) has its own helper.
//
// An Allocator is safe for concurrent use for different containers; the
// host files it touches are per container.
package allocate

import (
	"crypto/rand"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/libvars"
	"github.com/limitbed/limitbed/plugin/limitsfile"
)

// Profile selects whose behaviour the plugin reproduces.
type Profile string

const (
	// ProfileCurrent is this design: usage.cache, limits file by default.
	ProfileCurrent Profile = "current"
	// ProfileHAMiV210 behaves like HAMi v2.10's plugin, for version-skew
	// tests: environment only, a random <uuid>.cache, no file.
	ProfileHAMiV210 Profile = "hami-v2.10"
)

// ParseProfile validates a --compat-profile value.
func ParseProfile(s string) (Profile, error) {
	switch p := Profile(s); p {
	case ProfileCurrent, ProfileHAMiV210:
		return p, nil
	}
	return "", fmt.Errorf("compat profile %q is not one of %s|%s", s, ProfileCurrent, ProfileHAMiV210)
}

// FakeDriver locates fakegpu on the host for the test bed.
type FakeDriver struct {
	LibDir      string // holds libcuda.so.1 and libnvidia-ml.so.1
	ProfilePath string // fakegpu profile; "" = none
	StateDir    string // shared device state; "" = none
}

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

func (a *Allocator) allocate(req Request) (*pluginapi.ContainerAllocateResponse, error) {
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}

	// Checked before the pod and container: kubelet's static MIG resources
	// are not scheduled by HAMi and have no container entry.
	if a.IsMIG(req) {
		// MIG isolation is the hardware's: no HAMi variables, no libvgpu or
		// preload, hence nothing to write. The device is the kubelet's, as
		// the device table names it; a placement never chooses it.
		if len(req.UUIDs) == 0 || len(req.UUIDs) != len(req.DeviceIDs) {
			return nil, fmt.Errorf("MIG request for %v without the device table's identities of those devices", req.DeviceIDs)
		}
		resp.Envs[EnvVisibleDevices] = visibleDevices(req.UUIDs)
		a.fakeDriverMounts(resp)
		return resp, nil
	}

	if req.Pod == nil || req.Container == nil {
		return nil, fmt.Errorf("request without pod or container")
	}
	if len(req.Devices) == 0 {
		return nil, fmt.Errorf("no devices assigned")
	}
	if len(req.Devices) > libvars.Devices {
		return nil, fmt.Errorf("%d devices in one container, but libvgpu.so limits at most %d (%s_0..%d): devices past that would run unlimited; ask for at most %d",
			len(req.Devices), libvars.Devices, libvars.MemoryLimit, libvars.Devices-1, libvars.Devices)
	}
	if req.UUIDs != nil && !sameGPUs(uuids(req.Devices), req.UUIDs) {
		return nil, fmt.Errorf("the placement names %v, but the kubelet allocated %v: refusing another GPU", uuids(req.Devices), req.UUIDs)
	}
	key, err := ContainerKey(string(req.Pod.UID), req.Container.Name)
	if err != nil {
		return nil, fmt.Errorf("unsafe container directory name: %w", err)
	}
	p := a.paths(key)

	resp.Envs[EnvVisibleDevices] = visibleDevices(uuids(req.Devices))
	env := a.hamiEnv(req)
	for k, v := range env {
		resp.Envs[k] = v
	}
	a.libraryMounts(resp, p, controlDisabled(req.Container))
	if err := a.cacheDirMount(resp, p); err != nil {
		return nil, err
	}
	if err := a.lockDirMount(resp); err != nil {
		return nil, err
	}
	a.fakeDriverMounts(resp)
	if a.opts.ComputeScheduler && a.opts.Profile != ProfileHAMiV210 && !controlDisabled(req.Container) {
		if err := a.grantMount(resp, key, req.Devices); err != nil {
			return nil, err
		}
	}

	switch {
	case a.opts.Profile == ProfileHAMiV210:
		// v2.10 knows no file; leave whatever is on disk alone, as it would.
	case req.Delivery == v1.LimitDeliveryEnv:
		// A file from an earlier file-mode allocation would be stale.
		if err := a.publisher.RemoveFile(p.limitsFile); err != nil {
			return nil, err
		}
	default:
		if err := a.limitsFile(resp, p, req.Container, env); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// randomUUID returns a random RFC 4122 version 4 UUID, the shape of the
// names HAMi v2.10 gave its cache files.
func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// sameGPUs reports whether a and b name the same devices as many times.
func sameGPUs(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func uuids(devs annotations.ContainerDevices) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.UUID
	}
	return out
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
