package profile

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
)

const (
	head = "driver_version = 550.90.07\ncuda_version = 12040\n"
	dev0 = "device = 0\nname = X\nuuid = GPU-00000000-0000-0000-0000-000000000000\nmemory_mib = 1024\n" +
		"architecture = ampere\ncompute_capability = 8.0\nsm_count = 10\n"
	mig0 = "mig = 0\nmig_profile = 2g.10gb\nmig_uuid = MIG-00000000-0000-0000-0000-000000000000\n" +
		"mig_memory_mib = 512\nmig_gpu_instance_id = 1\nmig_compute_instance_id = 0\n"
)

// errorCases are malformed profiles and a piece of the error each must give (file, line, fix).
var errorCases = []struct{ name, text, want string }{
	{"unknown key names it, its line and the known keys", head + dev0 + "memroy_mib = 3\n",
		`line 10: unknown key "memroy_mib" (known: name uuid memory_mib`},
	{"unknown global key", "drvier_version = 1\n" + head + dev0, `line 1: unknown key "drvier_version"`},
	{"bad number", head + "device = 0\nmemory_mib = 16k\n", `line 4: memory_mib: "16k" is not a whole number`},
	{"negative number", head + "context_mib = -1\n" + dev0, `line 3: context_mib: "-1" is not a whole number`},
	{"underscore in a number", head + "context_mib = 1_000\n" + dev0, `"1_000" is not a whole number`},
	{"octal digit out of range", head + "context_mib = 08\n" + dev0, `"08" is not a whole number`},
	{"uint out of range", "cuda_version = 4294967296\n", `cuda_version: "4294967296" is not a whole number`},
	{"missing required device key", head + "device = 0\nname = X\nmemory_mib = 1\n", `device 0: missing required key "uuid"`},
	{"missing required global key", "driver_version = 1\n" + dev0, `missing required key "cuda_version"`},
	{"duplicate device index", head + dev0 + "device = 0\n", "line 10: device 0 defined twice (first at line 3)"},
	{"gap in device indexes", head + "device = 1\n", "device 0 is missing"},
	{"device index out of range", head + "device = 16\n", `device: "16" is not an index 0..15`},
	{"duplicate key", head + dev0 + "name = Y\n", `key "name" given twice`},
	{"device key before any device", head + "name = X\n", `key "name" is misplaced`},
	{"device key after a mig block", head + dev0 + "mig = 0\nsm_count = 3\n", `key "sm_count" is misplaced`},
	{"mig before device", head + "mig = 0\n", "mig = 0 before any device"},
	{"duplicate mig", head + dev0 + mig0 + "mig = 0\n", "mig 0 of device 0 defined twice"},
	{"gap in mig indexes", head + dev0 + "mig = 1\n", "device 0: mig 0 is missing"},
	{"mig missing a key", head + dev0 + "mig = 0\nmig_profile = a\n", `device 0 mig 0: missing required key "mig_uuid"`},
	{"bad uuid", head + "device = 0\nuuid = GPU-1234\n", `uuid: "GPU-1234" is not a UUID`},
	{"gpu uuid where mig uuid belongs", head + dev0 + "mig = 0\nmig_uuid = GPU-00000000-0000-0000-0000-000000000000\n",
		`is not a UUID (write MIG-`},
	{"bad compute capability", head + "device = 0\ncompute_capability = 8\n", "is not MAJOR.MINOR"},
	// sscanf's %u took a space, a sign or a minus (wrapping to a huge major): both readers refuse.
	{"compute capability with a space", head + "device = 0\ncompute_capability = 8. 6\n", "is not MAJOR.MINOR"},
	{"compute capability with a plus", head + "device = 0\ncompute_capability = 8.+6\n", "is not MAJOR.MINOR"},
	{"negative compute capability", head + "device = 0\ncompute_capability = -8.6\n", "is not MAJOR.MINOR"},
	{"compute capability over 32 bits", head + "device = 0\ncompute_capability = 4294967296.0\n", "is not MAJOR.MINOR"},
	{"bad architecture", head + "device = 0\narchitecture = blackwelll\n", `architecture: unknown "blackwelll"`},
	{"bad mig mode", head + "device = 0\nmig_mode = on\n", `mig_mode: "on" must be enabled or disabled`},
	{"mig blocks with mig disabled", head + dev0 + "mig_mode = disabled\n" + mig0, "has mig blocks but mig_mode = disabled"},
	{"no equals sign", head + "device 0\n", `line 3: expected "key = value"`},
	{"no key", head + "= 3\n", `line 3: expected "key = value"`},
	{"no devices", head, "no devices"},
	{"zero memory", head + strings.Replace(dev0, "memory_mib = 1024", "memory_mib = 0", 1), "memory_mib must be above 0"},
	{"empty string", head + "nvml_error =\n" + dev0, "nvml_error: value must be 1 to 95 characters"},
	{"string too long", head + "fail_alloc = " + strings.Repeat("x", 24) + "\n" + dev0, "fail_alloc: value must be 1 to 23 characters"},
	{"line too long", head + "# " + strings.Repeat("x", 1100) + "\n" + dev0, "line 3: line longer than 1023 characters"},
	{"mig instances larger than the GPU", head + dev0 + strings.Replace(mig0, "= 512", "= 2048", 1), "more than memory_mib"},
}

func badCases() []string {
	var texts []string
	for _, c := range errorCases {
		texts = append(texts, c.text)
	}
	return texts
}

// seeds are valid profiles exercising the defaults and derived values, and the fuzz seeds.
func seeds() []string {
	return []string{
		head + dev0,
		"# top\n\n" + head + "  # indented\n" + dev0 + "minor = 3   # inline\n",
		head + "context_mib = 0x10\nlaunch_ns = 010\nnvml_version = 12.1\r\n" + dev0 + mig0,
		head + dev0 + "mig_mode = enabled\n" + mig0 + "mig_copy_engines = 5\nmig = 1\nmig_profile = 9g.x\n" +
			"mig_uuid = MIG-00000000-0000-0000-0000-000000000001\nmig_memory_mib = 1\nmig_gpu_instance_id = 2\nmig_compute_instance_id = 0\n",
		head + strings.Replace(dev0, "device = 0", "device = 1", 1) + strings.Replace(dev0, "uuid = GPU-0", "uuid = GPU-1", 1),
		"driver_version = " + strings.Repeat("9", 31) + "\ncuda_version = 1\n" + dev0 + "pci_bus_id = 00000000:81:00.0\nbar1_mib = 0\n",
		head + dev0 + "mig = 0\nmig_profile = +3g.x\nmig_uuid = MIG-00000000-0000-0000-0000-000000000000\n" +
			"mig_memory_mib = 1\nmig_gpu_instance_id = 1\nmig_compute_instance_id = 0\nmig = 1\nmig_profile = -2g\n" +
			"mig_uuid = MIG-00000000-0000-0000-0000-000000000002\nmig_memory_mib = 1\nmig_gpu_instance_id = 1\nmig_compute_instance_id = 0\n",
	}
}

func TestErrors(t *testing.T) {
	for _, c := range errorCases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("t.profile", []byte(c.text))
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "profile t.profile") {
				t.Fatalf("error %v, want one naming profile t.profile and containing %q", err, c.want)
			}
		})
	}
}

func TestValuesAndDefaults(t *testing.T) {
	p, err := Parse("/x/a100-mig.v2.profile", []byte(seeds()[3]))
	if err != nil {
		t.Fatal(err)
	}
	d := p.Devices[0]
	if p.Name != "a100-mig" || p.NVMLVersion != "12.550.90.07" || p.ContextMiB != 300 || p.LaunchNS != 10000 {
		t.Errorf("globals %+v", p)
	}
	if d.Minor != 0 || d.PCIBusID != "00000000:01:00.0" || d.BAR1MiB != 256 || !d.MIGMode || d.CCMajor != 8 || d.Architecture != "ampere" {
		t.Errorf("device %+v", d)
	}
	if len(d.MIG) != 2 || d.MIG[0].Slices != 2 || d.MIG[0].CopyEngines != 5 || d.MIG[1].Slices != 1 || d.MIG[1].CopyEngines != 1 {
		t.Errorf("mig %+v", d.MIG)
	}
}

func TestShippedProfiles(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join(cbuild.RepoRoot(), "fakegpu", "profiles", "*.profile"))
	if len(paths) == 0 {
		t.Fatal("no shipped profiles")
	}
	for _, path := range paths {
		p, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range p.Devices {
			if !strings.HasPrefix(d.UUID, "GPU-") || d.MemoryMiB == 0 {
				t.Errorf("%s: device %+v", path, d)
			}
		}
	}
}

// FuzzParse: any input gives a profile or an error naming the file, never a panic; a parsed
// profile holds the format's bounds.
func FuzzParse(f *testing.F) {
	for _, s := range append(seeds(), badCases()...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		p, err := Parse("f.profile", []byte(text))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "profile f.profile") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		units := len(p.Devices)
		for _, d := range p.Devices {
			var sum uint64
			for _, m := range d.MIG {
				sum += m.MemoryMiB
			}
			if d.UUID == "" || d.MemoryMiB == 0 || sum > d.MemoryMiB || len(d.MIG) > MaxMIG || (len(d.MIG) > 0 && !d.MIGMode) {
				t.Fatalf("parsed out of bounds: %+v", d)
			}
			units += len(d.MIG)
		}
		if len(p.Devices) == 0 || len(p.Devices) > MaxDevices || units > MaxUnits {
			t.Fatalf("parsed %d devices, %d units", len(p.Devices), units)
		}
	})
}
