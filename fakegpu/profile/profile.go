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

// Profile is one parsed profile: the global keys, then the devices in index order.
type Profile struct {
	Path, Name    string // Name: the file name up to its first '.'
	DriverVersion string
	CUDAVersion   uint32
	NVMLVersion   string // default "12." + DriverVersion
	ContextMiB    uint64 // default 300
	LaunchNS      uint64 // default 10000
	BlockNS       uint64
	FailAlloc     string
	NVMLError     string
	LostDevice    string
	TimesliceUS   uint64 // the time slice between processes; 0: fakegpu's 1024
	PowerBoost    uint64 // percent; 0: 100 (no boost)
	NVMLSamples   string // exact | periodic; "": exact
	SMClockMHz    uint64 // the SM clock at full load; 0: 1500
	Devices       []Device
}

// Device is one "device = N" block.
type Device struct {
	Name         string
	UUID         string
	MemoryMiB    uint64
	PCIBusID     string // default "00000000:<index+1>:00.0"
	PCIDeviceID  uint32
	Minor        uint32 // default the index
	Architecture string // as written: kepler … hopper
	CCMajor      uint32
	CCMinor      uint32
	SMCount      uint32
	MIGMode      bool   // enabled by mig_mode or by having mig blocks
	BAR1MiB      uint64 // default 256
	MIG          []MIG
}

// MIG is one "mig = N" block of a device.
type MIG struct {
	Profile           string // "1g.5gb"
	UUID              string
	MemoryMiB         uint64
	GPUInstanceID     uint32
	ComputeInstanceID uint32
	SMCount           uint32
	CopyEngines       uint32 // default Slices
	Decoders          uint32
	Encoders          uint32
	JPEGs             uint32
	OFAs              uint32
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
	base := path[strings.LastIndexByte(path, '/')+1:]
	name, _, _ := strings.Cut(base, ".")
	if len(name) > 63 {
		name = name[:63]
	}
	ps := &parser{path: path, p: &Profile{Path: path, Name: name, ContextMiB: 300, LaunchNS: 10000}}
	lines := strings.Split(string(text), "\n")
	if strings.HasSuffix(string(text), "\n") {
		lines = lines[:len(lines)-1]
	}
	for i, line := range lines {
		ps.line = i + 1
		if len(line) > maxLine {
			return nil, ps.fail(ps.line, "line longer than %d characters", maxLine)
		}
		if strings.IndexByte(line, 0) >= 0 {
			return nil, ps.fail(ps.line, "NUL byte in the line: a profile is text")
		}
		if err := ps.parseLine(line); err != nil {
			return nil, err
		}
	}
	if err := ps.finish(); err != nil {
		return nil, err
	}
	return ps.p, nil
}

func (ps *parser) fail(line int, format string, args ...any) error {
	if line > 0 {
		return fmt.Errorf("profile %s line %d: "+format, append([]any{ps.path, line}, args...)...)
	}
	return fmt.Errorf("profile %s: "+format, append([]any{ps.path}, args...)...)
}
