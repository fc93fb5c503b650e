package v1

import (
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"sigs.k8s.io/yaml"
)

// Names whose near misses are errors rather than ignored fields: the
// sections and fields this plugin adds or keys on, which no HAMi file spells
// differently (see decodeTolerant).
var (
	deviceGuarded = []string{"version", "nvidia", "limitDelivery", "allowPodLimitDeliveryOverride", "hostPIDBroker", "enforcement"}
	pluginGuarded = []string{"version", "nodeconfig", "limitdelivery", "operatingmode", "enforcement"}
)

// ParseDeviceConfig parses and validates a device configuration (YAML or
// JSON), such as HAMi's stock device-config.yaml as its chart renders it.
// Sections and fields this plugin does not use are ignored with one warning on
// log naming them all; a typo of a field it uses, a wrong type or an invalid
// value is an error naming the field.
func ParseDeviceConfig(data []byte, log logr.Logger) (*DeviceConfig, error) {
	// Strict: a key given twice is an error, never "the last one wins".
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("parse device config: %w (give each key once)", err)
	}
	var c DeviceConfig
	ignored, err := decodeTolerant(j, &c, deviceGuarded)
	if err != nil {
		return nil, fmt.Errorf("parse device config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("device config: %w", err)
	}
	if len(ignored) > 0 {
		log.Info("Warning: ignoring device config fields this plugin does not use", "fields", ignored)
	}
	return &c, nil
}

// ParsePluginConfig parses and validates a config.json, such as HAMi's own.
// Fields this plugin does not use are ignored with one warning on log naming
// them; a typo of a field it uses, a wrong type or an invalid value is an
// error naming the field.
func ParsePluginConfig(data []byte, log logr.Logger) (*PluginConfig, error) {
	var c PluginConfig
	ignored, err := decodeTolerant(data, &c, pluginGuarded)
	if err != nil {
		return nil, fmt.Errorf("parse plugin config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("plugin config: %w", err)
	}
	if len(ignored) > 0 {
		log.Info("Warning: ignoring plugin config fields this plugin does not use", "fields", ignored)
	}
	return &c, nil
}

// LoadDeviceConfig reads and parses path; an empty path yields an empty config.
func LoadDeviceConfig(path string, log logr.Logger) (*DeviceConfig, error) {
	if path == "" {
		return &DeviceConfig{Version: Version}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read device config: %w", err)
	}
	c, err := ParseDeviceConfig(data, log.WithValues("file", path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// LoadPluginConfig reads and parses path; an empty or absent path yields an
// empty config (HAMi mounts config.json from an optional ConfigMap key).
func LoadPluginConfig(path string, log logr.Logger) (*PluginConfig, error) {
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
	c, err := ParsePluginConfig(data, log.WithValues("file", path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
