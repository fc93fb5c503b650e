package v1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// ParseDeviceConfig parses and validates a device configuration (YAML or
// JSON). Unknown fields are errors.
func ParseDeviceConfig(data []byte) (*DeviceConfig, error) {
	var c DeviceConfig
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("parse device config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("device config: %w", err)
	}
	return &c, nil
}

// ParsePluginConfig parses and validates a config.json. Unknown fields are
// errors.
func ParsePluginConfig(data []byte) (*PluginConfig, error) {
	var c PluginConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("parse plugin config: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("parse plugin config: trailing data after the JSON object")
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("plugin config: %w", err)
	}
	return &c, nil
}

// LoadDeviceConfig reads and parses path; an empty path yields an empty config.
func LoadDeviceConfig(path string) (*DeviceConfig, error) {
	if path == "" {
		return &DeviceConfig{Version: Version}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read device config: %w", err)
	}
	c, err := ParseDeviceConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// LoadPluginConfig reads and parses path; an empty or absent path yields an
// empty config (HAMi mounts config.json from an optional ConfigMap key).
func LoadPluginConfig(path string) (*PluginConfig, error) {
	if path == "" {
		return &PluginConfig{Version: Version}, nil
	}
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return &PluginConfig{Version: Version}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read plugin config: %w", err)
	}
	c, err := ParsePluginConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
