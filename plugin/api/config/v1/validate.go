package v1

import (
	"errors"
	"fmt"
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
	return errors.Join(errs...)
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
	if mem != nil && *mem <= 0 {
		errs = append(errs, fmt.Errorf("%sdeviceMemoryScaling: %v must be positive", where, *mem))
	}
	if core != nil && *core <= 0 {
		errs = append(errs, fmt.Errorf("%sdeviceCoreScaling: %v must be positive", where, *core))
	}
	return errs
}
