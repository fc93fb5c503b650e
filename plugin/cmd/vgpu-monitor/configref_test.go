package main

import (
	"testing"

	"github.com/limitbed/limitbed/plugin/internal/configref"
)

// TestConfigurationReferenceListsEveryFlag: docs/configuration.md lists every flag of this
// binary with its environment twin and default, and no flag the binary lacks.
func TestConfigurationReferenceListsEveryFlag(t *testing.T) {
	root, err := configref.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := configref.CheckFlags(root, "flags/vgpu-monitor", newFlagSet(&options{}), "v")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
