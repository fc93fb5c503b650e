package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadProfileIsStrict: the simulated node reads a profile as fakegpu does, so a typo that
// fakegpu refuses (here memroy_mib) is refused here too, naming the file, the line and the key,
// instead of giving the node a GPU of 0 MiB.
func TestReadProfileIsStrict(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typo.profile")
	text := "driver_version = 550.90.07\ncuda_version = 12040\ndevice = 0\nname = X\n" +
		"uuid = GPU-00000000-0000-0000-0000-000000000000\nmemroy_mib = 1024\n" +
		"architecture = ampere\ncompute_capability = 8.0\nsm_count = 10\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	gpus, err := ReadProfile(path)
	if err == nil {
		t.Fatalf("ReadProfile accepted an unknown key: %+v", gpus)
	}
	for _, want := range []string{path, "line 6", `unknown key "memroy_mib"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// TestReadProfileMIG: MIG instances come with their GPU, by the shipped MIG profile.
func TestReadProfileMIG(t *testing.T) {
	gpus, err := ReadProfile(filepath.Join("..", "..", "..", "fakegpu", "profiles", "a100-mig.profile"))
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 1 || len(gpus[0].MIG) != 3 || gpus[0].MemoryMiB != 40960 || !strings.HasPrefix(gpus[0].MIG[0], "MIG-") {
		t.Errorf("a100-mig: %+v", gpus)
	}
}
