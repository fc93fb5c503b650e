package main

import (
	"testing"

	"github.com/limitbed/limitbed/plugin/internal/configref"
)

// TestConfigurationReferenceListsEveryFlag: docs/configuration.md lists every flag of this
// binary with its environment twin and default, and no flag the binary lacks.
func TestConfigurationReferenceListsEveryFlag(t *testing.T) {
	configref.AssertFlags(t, "flags/vgpu-scheduler", newFlagSet(&options{}), "v")
}
