package v1

import "github.com/go-logr/logr"

// Effective is the configuration in force on one node: global values with
// the node's entry applied on top, every field resolved to a value.
type Effective struct {
	NodeName                     string
	OperatingMode                OperatingMode
	DeviceSplitCount             uint
	DeviceMemoryScaling          float64
	DeviceCoreScaling            float64
	LibCudaLogLevel              string
	DisableCoreLimit             bool
	HostPIDBroker                bool
	EnableGetPreferredAllocation bool
	ResourceCountName            string
	// Requests is how the scheduler reads a container's requests; the
	// plugin holds every placement to them.
	Requests    Requests
	Enforcement Enforcement

	// The delivery layers stay separate: the pod annotation is resolved
	// against them per allocation (see package delivery).
	GlobalLimitDelivery           *LimitDelivery
	NodeLimitDelivery             *LimitDelivery
	AllowPodLimitDeliveryOverride bool
}

// Requests are the resource names and defaults HAMi's scheduler and webhook
// read a container's GPU requests with (nvidia.resourceCountName, ...,
// defaultMemory, defaultCores, defaultGPUNum, memoryFactor).
type Requests struct {
	CountName            string
	MemoryName           string
	CoreName             string
	MemoryPercentageName string
	// DefaultMemory (MiB) applies to a container that asks for neither
	// memory nor a memory percentage; 0 means the whole device.
	DefaultMemory int64
	// DefaultCores (percent) applies to a container without a core request.
	DefaultCores int32
	// MemoryFactor multiplies a memory request (e.g. 1024: gpumem in GiB).
	MemoryFactor int32
}

// Defaults that apply when neither file sets a value (HAMi's chart defaults).
const (
	DefaultDeviceSplitCount             = 10
	DefaultResourceCountName            = "nvidia.com/gpu"
	DefaultResourceMemoryName           = "nvidia.com/gpumem"
	DefaultResourceCoreName             = "nvidia.com/gpucores"
	DefaultResourceMemoryPercentageName = "nvidia.com/gpumem-percentage"
	DefaultMemoryFactor                 = 1
)

// LoadEffective reads the global device configuration (deviceFile; "" = none) and the per-node
// overrides (nodeFile; a missing file = none) and resolves them for nodeName: what both binaries
// start from.
func LoadEffective(deviceFile, nodeFile, nodeName string, log logr.Logger) (Effective, error) {
	dc, err := LoadDeviceConfig(deviceFile, log)
	if err != nil {
		return Effective{}, err
	}
	pc, err := LoadPluginConfig(nodeFile, log)
	if err != nil {
		return Effective{}, err
	}
	return Resolve(dc, pc, nodeName), nil
}

// Resolve merges the global config and the entry of pc named nodeName. Later
// matching entries override earlier ones field by field.
func Resolve(dc *DeviceConfig, pc *PluginConfig, nodeName string) Effective {
	e := Effective{
		NodeName:            nodeName,
		OperatingMode:       OperatingModeHAMiCore,
		DeviceSplitCount:    DefaultDeviceSplitCount,
		DeviceMemoryScaling: 1,
		DeviceCoreScaling:   1,
		ResourceCountName:   DefaultResourceCountName,
		Requests: Requests{
			CountName: DefaultResourceCountName, MemoryName: DefaultResourceMemoryName, CoreName: DefaultResourceCoreName,
			MemoryPercentageName: DefaultResourceMemoryPercentageName, MemoryFactor: DefaultMemoryFactor,
		},
		Enforcement: DefaultEnforcement,
	}
	if dc != nil && dc.Nvidia != nil {
		n := dc.Nvidia
		set(&e.DeviceSplitCount, n.DeviceSplitCount)
		set(&e.DeviceMemoryScaling, n.DeviceMemoryScaling)
		set(&e.DeviceCoreScaling, n.DeviceCoreScaling)
		setLogLevel(&e.LibCudaLogLevel, n.LibCudaLogLevel)
		set(&e.DisableCoreLimit, n.DisableCoreLimit)
		set(&e.HostPIDBroker, n.HostPIDBroker)
		set(&e.AllowPodLimitDeliveryOverride, n.AllowPodLimitDeliveryOverride)
		set(&e.ResourceCountName, n.ResourceCountName)
		set(&e.Enforcement, n.Enforcement)
		e.GlobalLimitDelivery = n.LimitDelivery
		r := &e.Requests
		set(&r.CountName, n.ResourceCountName)
		set(&r.MemoryName, n.ResourceMemoryName)
		set(&r.CoreName, n.ResourceCoreName)
		set(&r.MemoryPercentageName, n.ResourceMemoryPercentageName)
		set(&r.DefaultMemory, n.DefaultMemory)
		set(&r.DefaultCores, n.DefaultCores)
		set(&r.MemoryFactor, n.MemoryFactor)
	}
	if pc != nil {
		for _, nc := range pc.NodeConfig {
			if nc.Name != nodeName {
				continue
			}
			set(&e.OperatingMode, nc.OperatingMode)
			set(&e.EnableGetPreferredAllocation, nc.EnableGetPreferredAllocation)
			set(&e.DeviceSplitCount, nc.DeviceSplitCount)
			set(&e.DeviceMemoryScaling, nc.DeviceMemoryScaling)
			set(&e.DeviceCoreScaling, nc.DeviceCoreScaling)
			setLogLevel(&e.LibCudaLogLevel, nc.LibCudaLogLevel)
			set(&e.Enforcement, nc.Enforcement)
			if nc.LimitDelivery != nil {
				e.NodeLimitDelivery = nc.LimitDelivery
			}
		}
	}
	return e
}

func set[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

func setLogLevel(dst *string, src *LogLevel) {
	if src != nil {
		*dst = string(*src)
	}
}
