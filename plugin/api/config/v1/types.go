// Package v1 is the versioned configuration of the vGPU device plugin: the
// global device configuration (HAMi's device-config.yaml, "nvidia:" section)
// and the per-node overrides (HAMi's config.json, "nodeconfig" entries).
//
// Fields are pointers so that "unset" differs from a zero value: a node entry
// overrides only what it sets. Parsing reads HAMi's own files as they are:
// fields this plugin does not use (other vendors' sections, HAMi fields it has
// no use for) are ignored with one warning naming them, while a typo of a
// field it does use, a wrong type or an invalid value is an error naming the
// field.
package v1

// Version is the only config version this package accepts. An empty version
// is read as Version so that unversioned HAMi files keep working.
const Version = "v1"

// LimitDelivery selects how limits reach HAMi-core.
type LimitDelivery string

const (
	// LimitDeliveryFile writes and mounts /overrideEnv and still injects the
	// environment (the default).
	LimitDeliveryFile LimitDelivery = "file"
	// LimitDeliveryEnv injects the environment only.
	LimitDeliveryEnv LimitDelivery = "env"
)

// DefaultLimitDelivery applies when no layer sets one.
const DefaultLimitDelivery = LimitDeliveryFile

// Valid reports whether d is one of file|env.
func (d LimitDelivery) Valid() bool { return d == LimitDeliveryFile || d == LimitDeliveryEnv }

// Enforcement is what the node monitor does when the driver shows a
// container holding more GPU memory than its limit allows.
type Enforcement string

const (
	// EnforcementReport exports metrics, logs and records an Event on the pod
	// (the default).
	EnforcementReport Enforcement = "report"
	// EnforcementKill also SIGKILLs the offending process (the one whose
	// memory put its container over), never another pod's.
	EnforcementKill Enforcement = "kill"
)

// DefaultEnforcement applies when neither file sets one.
const DefaultEnforcement = EnforcementReport

// Valid reports whether e is one of report|kill.
func (e Enforcement) Valid() bool { return e == EnforcementReport || e == EnforcementKill }

// OperatingMode of a node's GPUs.
type OperatingMode string

const (
	// OperatingModeHAMiCore shares GPUs through HAMi-core (libvgpu.so).
	OperatingModeHAMiCore OperatingMode = "hami-core"
	// OperatingModeMIG hands out MIG instances: no HAMi variables, mounts or file.
	OperatingModeMIG OperatingMode = "mig"
)

// DeviceConfig is the global device configuration file.
type DeviceConfig struct {
	Version string        `json:"version,omitempty"`
	Nvidia  *NvidiaConfig `json:"nvidia,omitempty"`
}

// NvidiaConfig is the "nvidia:" section. Field names and meanings follow
// HAMi so an existing section parses; other fields are ignored (ParseDeviceConfig).
type NvidiaConfig struct {
	ResourceCountName            *string `json:"resourceCountName,omitempty"`
	ResourceMemoryName           *string `json:"resourceMemoryName,omitempty"`
	ResourceCoreName             *string `json:"resourceCoreName,omitempty"`
	ResourceMemoryPercentageName *string `json:"resourceMemoryPercentageName,omitempty"`
	ResourcePriorityName         *string `json:"resourcePriorityName,omitempty"`
	OverwriteEnv                 *bool   `json:"overwriteEnv,omitempty"`
	DefaultMemory                *int64  `json:"defaultMemory,omitempty"`
	DefaultCores                 *int32  `json:"defaultCores,omitempty"`
	DefaultGPUNum                *int32  `json:"defaultGPUNum,omitempty"`
	MemoryFactor                 *int32  `json:"memoryFactor,omitempty"`
	// DisableCoreLimit injects GPU_CORE_UTILIZATION_POLICY=disable.
	DisableCoreLimit *bool `json:"disableCoreLimit,omitempty"`
	// GPUCorePolicy is applied by the webhook (default|force|disable); the
	// plugin only carries the value the webhook put in the container spec.
	GPUCorePolicy    *string `json:"gpuCorePolicy,omitempty"`
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`

	// LimitDelivery is the cluster-wide delivery mode (file|env).
	LimitDelivery *LimitDelivery `json:"limitDelivery,omitempty"`
	// AllowPodLimitDeliveryOverride lets a pod choose env delivery through
	// the hami.io/limit-delivery annotation. Off by default: env delivery
	// leaves login sessions unlimited, so a tenant must not pick it alone.
	AllowPodLimitDeliveryOverride *bool `json:"allowPodLimitDeliveryOverride,omitempty"`
	// HostPIDBroker injects LIBVGPU_HOSTPID_BROKER=1.
	HostPIDBroker *bool `json:"hostPIDBroker,omitempty"`
	// Enforcement is the node monitor's answer to a container over its
	// memory limit by the driver's count (report|kill).
	Enforcement *Enforcement `json:"enforcement,omitempty"`

	NodeDefaults `json:",inline"`
}

// NodeDefaults are the settings a node entry may override.
type NodeDefaults struct {
	DeviceSplitCount          *uint     `json:"deviceSplitCount,omitempty"`
	DeviceMemoryScaling       *float64  `json:"deviceMemoryScaling,omitempty"`
	DeviceCoreScaling         *float64  `json:"deviceCoreScaling,omitempty"`
	PreConfiguredDeviceMemory *int64    `json:"preConfiguredDeviceMemory,omitempty"`
	LibCudaLogLevel           *LogLevel `json:"libCudaLogLevel,omitempty"`
	EnableNumaTopology        *bool     `json:"enableNumaTopology,omitempty"`
}

// PluginConfig is the plugin's config.json: per-node overrides. JSON keys
// are lowercase as in HAMi.
type PluginConfig struct {
	Version    string       `json:"version,omitempty"`
	NodeConfig []NodeConfig `json:"nodeconfig,omitempty"`
}

// NodeConfig overrides the global configuration on the node called Name.
type NodeConfig struct {
	Name                         string         `json:"name"`
	OperatingMode                *OperatingMode `json:"operatingmode,omitempty"`
	EnableGetPreferredAllocation *bool          `json:"enablegetpreferredallocation,omitempty"`
	DeviceSplitCount             *uint          `json:"devicesplitcount,omitempty"`
	DeviceMemoryScaling          *float64       `json:"devicememoryscaling,omitempty"`
	DeviceCoreScaling            *float64       `json:"devicecorescaling,omitempty"`
	PreConfiguredDeviceMemory    *int64         `json:"preconfigureddevicememory,omitempty"`
	LibCudaLogLevel              *LogLevel      `json:"libcudaloglevel,omitempty"`
	EnableNumaTopology           *bool          `json:"enablenumatopology,omitempty"`
	LimitDelivery                *LimitDelivery `json:"limitdelivery,omitempty"`
	Enforcement                  *Enforcement   `json:"enforcement,omitempty"`
}
