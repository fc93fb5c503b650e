// Package profile is the Go reader of fakegpu's device profiles (fakegpu/profiles/*.profile),
// the only one: the harness, the simulated node and the tests all read profiles through it.
//
// The driver's own reader is fakegpu/src/profile.c; this package follows it rule for rule (the
// same keys, scopes, defaults and derived values, the same error text) and a test runs every
// shipped profile and every malformed case through both and compares what they read. A key
// either reader does not know is an error naming the file, the line and the key, never a
// silently different GPU.
package profile

import (
	"fmt"
	"os"
	"strings"
)

// Limits of the format, as fakegpu/src/fg.h sets them.
const (
	MaxDevices = 16 // physical GPUs in one profile
	MaxMIG     = 7  // MIG instances per GPU
	MaxUnits   = 64 // GPUs plus MIG instances
	maxLine    = 1023
)

// Profile is one parsed profile: the global keys, then the devices in index order. A field
// tagged `profile:"name"` keeps that key's value (keys.def, the one table of keys); a key without
// a field is read and checked all the same.
type Profile struct {
	Path, Name    string // Name: the file name up to its first '.'
	DriverVersion string `profile:"driver_version"`
	CUDAVersion   uint32 `profile:"cuda_version"`
	NVMLVersion   string `profile:"nvml_version"` // default "12." + DriverVersion
	ContextMiB    uint64 `profile:"context_mib"`  // default 300
	LaunchNS      uint64 `profile:"launch_ns"`    // default 10000
	BlockNS       uint64 `profile:"block_ns"`
	FailAlloc     string `profile:"fail_alloc"`
	NVMLError     string `profile:"nvml_error"`
	LostDevice    string `profile:"lost_device"`
	Devices       []Device
}

// Device is one "device = N" block.
type Device struct {
	Name         string `profile:"name"`
	UUID         string `profile:"uuid"`
	MemoryMiB    uint64 `profile:"memory_mib"`
	PCIBusID     string `profile:"pci_bus_id"`    // default "00000000:<index+1>:00.0"
	PCIDeviceID  uint32 `profile:"pci_device_id"` //
	Minor        uint32 `profile:"minor"`         // default the index
	Architecture string `profile:"architecture"`  // as written: kepler … hopper
	CCMajor      uint32 `profile:"compute_capability,major"`
	CCMinor      uint32 `profile:"compute_capability,minor"`
	SMCount      uint32 `profile:"sm_count"`
	MIGMode      bool   `profile:"mig_mode"` // enabled by mig_mode or by having mig blocks
	BAR1MiB      uint64 `profile:"bar1_mib"` // default 256
	MIG          []MIG
}

// MIG is one "mig = N" block of a device.
type MIG struct {
	Profile           string `profile:"mig_profile"` // "1g.5gb"
	UUID              string `profile:"mig_uuid"`
	MemoryMiB         uint64 `profile:"mig_memory_mib"`
	GPUInstanceID     uint32 `profile:"mig_gpu_instance_id"`
	ComputeInstanceID uint32 `profile:"mig_compute_instance_id"`
	SMCount           uint32 `profile:"mig_sm_count"`
	CopyEngines       uint32 `profile:"mig_copy_engines"` // default Slices
	Decoders          uint32 `profile:"mig_decoders"`
	Encoders          uint32 `profile:"mig_encoders"`
	JPEGs             uint32 `profile:"mig_jpegs"`
	OFAs              uint32 `profile:"mig_ofas"`
	Slices            uint32 // derived: the <n> of "<n>g.…", else 1
}

// Load reads and parses the profile at path.
func Load(path string) (*Profile, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("profile %s: cannot open: %w (set FAKEGPU_PROFILE to a profile name or path)", path, err)
	}
	return Parse(path, text)
}

// Parse parses text, the contents of path.
func Parse(path string, text []byte) (*Profile, error) {
	p, _, err := parse(path, text, false)
	return p, err
}

// parse parses text; with keepOther it also returns the values of the keys no Go field keeps, by
// block ("profile", "device D", "mig D.M"), as their canonical text.
func parse(path string, text []byte, keepOther bool) (*Profile, map[string]map[string]string, error) {
	base := path[strings.LastIndexByte(path, '/')+1:]
	name, _, _ := strings.Cut(base, ".")
	if len(name) > 63 {
		name = name[:63]
	}
	ps := &parser{path: path, p: &Profile{Path: path, Name: name}}
	if keepOther {
		ps.other = map[string]map[string]string{}
	}
	lines := strings.Split(string(text), "\n")
	if strings.HasSuffix(string(text), "\n") {
		lines = lines[:len(lines)-1]
	}
	for i, line := range lines {
		ps.line = i + 1
		if len(line) > maxLine {
			return nil, nil, ps.fail(ps.line, "line longer than %d characters", maxLine)
		}
		if strings.IndexByte(line, 0) >= 0 {
			return nil, nil, ps.fail(ps.line, "NUL byte in the line: a profile is text")
		}
		if err := ps.parseLine(line); err != nil {
			return nil, nil, err
		}
	}
	if err := ps.finish(); err != nil {
		return nil, nil, err
	}
	return ps.p, ps.other, nil
}

func (ps *parser) fail(line int, format string, args ...any) error {
	if line > 0 {
		return fmt.Errorf("profile %s line %d: "+format, append([]any{ps.path, line}, args...)...)
	}
	return fmt.Errorf("profile %s: "+format, append([]any{ps.path}, args...)...)
}
