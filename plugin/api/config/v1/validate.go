package v1

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Bounds of admin input. Each keeps a value inside what the rest of the
// system accepts: the kubelet's device list, libvgpu.so's device count, the
// int32 MiB of HAMi's device string.
const (
	// MaxDeviceSplitCount keeps a node's device list (GPUs x split) far
	// below the kubelet's 4 MiB gRPC message limit for ListAndWatch.
	MaxDeviceSplitCount = 1024
	// MaxScaling bounds deviceMemoryScaling and deviceCoreScaling.
	MaxScaling = 100
	// MaxDefaultGPUNum is libvgpu.so's device count per container.
	MaxDefaultGPUNum = 16
	// MaxMemoryFactor bounds memoryFactor (1024: requests in GiB).
	MaxMemoryFactor = 1 << 20
)

// Validate checks values that parsing alone cannot.
func (c *DeviceConfig) Validate() error {
	if err := validateVersion(c.Version); err != nil {
		return err
	}
	if c.Nvidia == nil {
		return nil
	}
	n := c.Nvidia
	var errs []error
	if n.LimitDelivery != nil && !n.LimitDelivery.Valid() {
		errs = append(errs, fmt.Errorf("nvidia.limitDelivery: %q is not one of file|env", *n.LimitDelivery))
	}
	if n.Enforcement != nil && !n.Enforcement.Valid() {
		errs = append(errs, fmt.Errorf("nvidia.enforcement: %q is not one of report|kill", *n.Enforcement))
	}
	if n.GPUCorePolicy != nil {
		switch *n.GPUCorePolicy {
		case "default", "force", "disable":
		default:
			errs = append(errs, fmt.Errorf("nvidia.gpuCorePolicy: %q is not one of default|force|disable", *n.GPUCorePolicy))
		}
	}
	errs = append(errs, validateNodeDefaults("nvidia.", n.DeviceSplitCount, n.DeviceMemoryScaling, n.DeviceCoreScaling)...)
	errs = append(errs, validateLogLevel("nvidia.libCudaLogLevel", n.LibCudaLogLevel)...)
	errs = append(errs, n.validateRequests()...)
	if n.PreConfiguredDeviceMemory != nil && *n.PreConfiguredDeviceMemory < 0 {
		errs = append(errs, fmt.Errorf("nvidia.preConfiguredDeviceMemory: %d must not be negative", *n.PreConfiguredDeviceMemory))
	}
	return errors.Join(errs...)
}

// validateRequests checks the settings the plugin reads a container's
// requests with: resource names Kubernetes accepts (and distinct ones), and
// defaults inside what a placement can hold.
func (n *NvidiaConfig) validateRequests() []error {
	var errs []error
	names := []struct {
		field string
		v     *string
		def   string // what an unset field resolves to
	}{
		{"resourceCountName", n.ResourceCountName, DefaultResourceCountName},
		{"resourceMemoryName", n.ResourceMemoryName, DefaultResourceMemoryName},
		{"resourceCoreName", n.ResourceCoreName, DefaultResourceCoreName},
		{"resourceMemoryPercentageName", n.ResourceMemoryPercentageName, DefaultResourceMemoryPercentageName},
		{"resourcePriorityName", n.ResourcePriorityName, ""},
	}
	seen := map[string]string{}
	for _, f := range names {
		if f.v == nil {
			if f.def != "" {
				seen[f.def] = f.field
			}
			continue
		}
		if !isExtendedResourceName(*f.v) {
			errs = append(errs, fmt.Errorf("nvidia.%s: %q is not an extended resource name: use <domain>/<name>, e.g. nvidia.com/gpumem", f.field, *f.v))
			continue
		}
		if other, ok := seen[*f.v]; ok {
			errs = append(errs, fmt.Errorf("nvidia.%s: %s is also nvidia.%s; each resource name must be its own", f.field, *f.v, other))
		}
		seen[*f.v] = f.field
	}
	if v := n.DefaultMemory; v != nil && (*v < 0 || *v > math.MaxInt32) {
		errs = append(errs, fmt.Errorf("nvidia.defaultMemory: %d is not in 0..%d (MiB; 0: the whole device)", *v, math.MaxInt32))
	}
	if v := n.DefaultCores; v != nil && (*v < 0 || *v > 100) {
		errs = append(errs, fmt.Errorf("nvidia.defaultCores: %d is not in 0..100 (percent)", *v))
	}
	if v := n.DefaultGPUNum; v != nil && (*v < 0 || *v > MaxDefaultGPUNum) {
		errs = append(errs, fmt.Errorf("nvidia.defaultGPUNum: %d is not in 0..%d (libvgpu.so limits at most %d devices per container)", *v, MaxDefaultGPUNum, MaxDefaultGPUNum))
	}
	if v := n.MemoryFactor; v != nil && (*v < 1 || *v > MaxMemoryFactor) {
		errs = append(errs, fmt.Errorf("nvidia.memoryFactor: %d is not in 1..%d (MiB per unit of the memory request)", *v, MaxMemoryFactor))
	}
	return errs
}

// isExtendedResourceName reports a domain-prefixed qualified name, the
// shape Kubernetes requires of an extended resource (nvidia.com/gpu).
func isExtendedResourceName(s string) bool {
	return strings.Contains(s, "/") && len(validation.IsQualifiedName(s)) == 0
}

// Validate checks values that parsing alone cannot.
func (c *PluginConfig) Validate() error {
	if err := validateVersion(c.Version); err != nil {
		return err
	}
	var errs []error
	for i, e := range c.NodeConfig {
		where := fmt.Sprintf("nodeconfig[%d] (node %q): ", i, e.Name)
		if e.Name == "" {
			errs = append(errs, fmt.Errorf("nodeconfig[%d]: name is required", i))
		} else if msgs := validation.IsDNS1123Subdomain(e.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("nodeconfig[%d]: name %q is not a node name: %s", i, e.Name, strings.Join(msgs, "; ")))
		}
		if e.LimitDelivery != nil && !e.LimitDelivery.Valid() {
			errs = append(errs, fmt.Errorf("%slimitdelivery: %q is not one of file|env", where, *e.LimitDelivery))
		}
		if e.Enforcement != nil && !e.Enforcement.Valid() {
			errs = append(errs, fmt.Errorf("%senforcement: %q is not one of report|kill", where, *e.Enforcement))
		}
		if e.OperatingMode != nil && *e.OperatingMode != OperatingModeHAMiCore && *e.OperatingMode != OperatingModeMIG {
			errs = append(errs, fmt.Errorf("%soperatingmode: %q is not one of hami-core|mig", where, *e.OperatingMode))
		}
		errs = append(errs, validateNodeDefaults(where, e.DeviceSplitCount, e.DeviceMemoryScaling, e.DeviceCoreScaling)...)
		errs = append(errs, validateLogLevel(where+"libcudaloglevel", e.LibCudaLogLevel)...)
		if e.PreConfiguredDeviceMemory != nil && *e.PreConfiguredDeviceMemory < 0 {
			errs = append(errs, fmt.Errorf("%spreconfigureddevicememory: %d must not be negative", where, *e.PreConfiguredDeviceMemory))
		}
	}
	return errors.Join(errs...)
}

func validateVersion(v string) error {
	if v != "" && v != Version {
		return fmt.Errorf("version: %q is not supported (want %q)", v, Version)
	}
	return nil
}

func validateLogLevel(where string, l *LogLevel) []error {
	if l != nil && !l.Valid() {
		return []error{fmt.Errorf("%s: %q is not a log level: use 0 (silent), 1 (errors), 2 (warnings), 3 (info) or 4 (debug)", where, string(*l))}
	}
	return nil
}

func validateNodeDefaults(where string, split *uint, mem, core *float64) []error {
	var errs []error
	if split != nil && *split == 0 {
		errs = append(errs, fmt.Errorf("%sdeviceSplitCount: must be at least 1", where))
	}
	if split != nil && *split > MaxDeviceSplitCount {
		errs = append(errs, fmt.Errorf("%sdeviceSplitCount: %d is more than %d: the device list would outgrow what the kubelet accepts", where, *split, MaxDeviceSplitCount))
	}
	// Written so that NaN fails too.
	if mem != nil && !(*mem > 0 && *mem <= MaxScaling) {
		errs = append(errs, fmt.Errorf("%sdeviceMemoryScaling: %v is not in (0, %d]", where, *mem, MaxScaling))
	}
	if core != nil && !(*core > 0 && *core <= MaxScaling) {
		errs = append(errs, fmt.Errorf("%sdeviceCoreScaling: %v is not in (0, %d]", where, *core, MaxScaling))
	}
	return errs
}
