// Package region decodes the shared usage region (usage.cache) that every
// process of a container maps: limitbed's own layout (docs/usage-cache.md,
// hamicore/include/limitbed/region.h) and upstream HAMi-core's
// shared_region_t, into one model. The layout is chosen by the file's magic
// and version; anything else is refused with an error that says what was
// found and which layouts are understood.
//
// The package works on bytes only. Opening the file (a path that a container
// can write) and asking who holds a lock belong to the caller, which passes
// the data and, for layouts with lock bytes, a liveness query.
package region

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strings"
)

// MaxDevices is the number of device entries both layouts hold.
const MaxDevices = 16

// MaxFileSize is the largest region file of any understood layout. A reader
// that reads one byte more can tell a longer file from a complete one.
const MaxFileSize = hamiFileSizeMax

// Layout names one region layout.
type Layout struct {
	Name  string `json:"name"`
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
}

// The layout families this package decodes.
const (
	NameLimitbed = "limitbed"
	NameHAMiCore = "hami-core"
)

func (l Layout) String() string {
	if l.Name == NameLimitbed {
		return fmt.Sprintf("%s v%d", l.Name, l.Major)
	}
	return fmt.Sprintf("%s v%d.%d", l.Name, l.Major, l.Minor)
}

// understood describes the accepted layouts for error messages.
const understood = "understood: limitbed v2 (magic 0x4547415355424c, 200704 bytes), " +
	"hami-core v1.x (magic 19920718, major 1, 2008952 or 2008953 bytes)"

// Region is one decoded usage region. Fields that only one layout has say so;
// the other layout leaves them zero.
type Region struct {
	Layout Layout `json:"layout"`
	Size   int    `json:"file_size"`
	// Devices are the devices with a limit, usage, or (HAMi-core) an entry
	// below device_num, by device index (limitbed: the GPU's NVML index;
	// HAMi-core: the CUDA ordinal of the process that wrote it).
	Devices []Device `json:"devices"`
	// Slots are the occupied process slots, live and dead, in slot order.
	Slots []Slot `json:"slots"`

	Priority   int32 `json:"priority"`
	UtilSwitch int32 `json:"util_switch"`

	// limitbed only.
	Policy        uint32 `json:"policy"`
	CreatorPID    int32  `json:"creator_pid"`
	LimitsFormat  uint32 `json:"limits_format"`
	Oversubscribe bool   `json:"oversubscribe"`
	// Overflow: a process accounted outside the slots, so UsedBytes may hold
	// bytes of no slot.
	Overflow bool `json:"overflow"`
	// CalibratedAt: when a process last ran the compute limiter's full-load
	// calibration (Unix seconds, 0 = never).
	CalibratedAt uint64 `json:"calibrated_at,omitempty"`

	// HAMi-core only.
	DeviceCount    uint64 `json:"device_count,omitempty"`
	OwnerPID       uint64 `json:"owner_pid,omitempty"` // holder of the region semaphore, 0 = none
	RecentKernel   int32  `json:"recent_kernel,omitempty"`
	LastKernelTime uint64 `json:"last_kernel_time,omitempty"`
}

// Device is one device of a region, by device index (see Region.Devices).
type Device struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"` // HAMi-core only
	// LimitBytes is the stamped memory limit; Unlimited is set instead when
	// the device has none. In limitbed's layout a limit of 0 refuses every
	// allocation; in HAMi-core's 0 is no limit (Unlimited).
	LimitBytes uint64 `json:"limit_bytes"`
	Unlimited  bool   `json:"unlimited"`
	// UsedBytes is the counter the library checks the limit against:
	// limitbed's used_total, HAMi-core's sum over every slot.
	UsedBytes uint64 `json:"used_bytes"`
	// LiveBytes is the sum over the live slots only.
	LiveBytes uint64 `json:"live_bytes"`
	// SMLimit is the compute limit in percent; 100 = none (HAMi-core's 0,
	// "not set", reads as 100).
	SMLimit uint32 `json:"sm_limit"`
	// WorkFactor (limitbed only) is the compute limiter's measured clock
	// factor in thousandths (1000..1500), 0 = not measured: docs/hamicore.md.
	WorkFactor uint32 `json:"work_factor,omitempty"`
}

// Slot is one occupied process slot.
type Slot struct {
	Index   int   `json:"index"`
	PID     int32 `json:"pid"`     // in the process's own PID namespace
	HostPID int32 `json:"hostpid"` // 0 = unknown
	// Alive: limitbed, the owner holds the slot's lock byte (or no liveness
	// query was given); HAMi-core, the pid is not 0 (a process clears it when
	// it exits; one killed outright stays until another process reclaims it).
	Alive bool `json:"alive"`
	// Used is what this process accounted, per device index.
	Used [MaxDevices]uint64 `json:"used"`

	ClaimedAt uint64 `json:"claimed_at,omitempty"` // limitbed only: CLOCK_REALTIME seconds
	// HAMi-core only: 1 running, 2 suspended, 0 exited; the parts of Used
	// (context, module, data), and the memory NVML last reported for the
	// process.
	Status   int32                    `json:"status,omitempty"`
	Parts    *[MaxDevices]MemoryParts `json:"parts,omitempty"`
	Observed *[MaxDevices]uint64      `json:"observed,omitempty"`
}

// MemoryParts splits a HAMi-core slot's usage of one device.
type MemoryParts struct {
	Context uint64 `json:"context"`
	Module  uint64 `json:"module"`
	Data    uint64 `json:"data"`
}

// Live returns the slots whose process still runs.
func (r Region) Live() []Slot {
	var out []Slot
	for _, s := range r.Slots {
		if s.Alive {
			out = append(out, s)
		}
	}
	return out
}

// DeadSlots counts occupied slots whose process is gone and that no process
// has reclaimed yet.
func (r Region) DeadSlots() int { return len(r.Slots) - len(r.Live()) }

// Options tune decoding.
type Options struct {
	// SlotLocked reports whether the owner of slot i holds its lock byte
	// (LockByte(i)). Only layouts with lock bytes (limitbed) ask; nil counts
	// every active slot as live.
	SlotLocked func(slot int) (bool, error)
}

// ErrNotRegion is returned for data that is no understood usage region.
var ErrNotRegion = errors.New("not a usage region")

// ErrUnsupportedVersion is returned for a known magic with a layout version
// this package does not decode.
var ErrUnsupportedVersion = errors.New("unsupported usage region layout version")

// Decode decodes a whole region file. Errors wrap ErrNotRegion or
// ErrUnsupportedVersion where those apply and list the understood layouts.
func Decode(b []byte, opt Options) (Region, error) {
	ne := binary.NativeEndian // both layouts are in the writing machine's byte order
	if len(b) < 16 {
		return Region{}, fmt.Errorf("%w: %d bytes (%s)", ErrNotRegion, len(b), understood)
	}
	m32, m64 := ne.Uint32(b), ne.Uint64(b)
	switch {
	case m32 == hamiMagic:
		major, minor := ne.Uint32(b[hamiOffMajor:]), ne.Uint32(b[hamiOffMinor:])
		if major != hamiMajor {
			return Region{}, fmt.Errorf("%w: hami-core magic with version %d.%d (%s)", ErrUnsupportedVersion, major, minor, understood)
		}
		return decodeHAMi(b, minor)
	case m64 == limitbedMagic:
		if v := ne.Uint32(b[lbOffVersion:]); v != limitbedVersion {
			return Region{}, fmt.Errorf("%w: limitbed magic with version %d (%s)", ErrUnsupportedVersion, v, understood)
		}
		return decodeLimitbed(b, opt)
	case m64 == 0:
		return Region{}, fmt.Errorf("%w: not initialised yet (magic 0)", ErrNotRegion)
	case m64 == bits.ReverseBytes64(limitbedMagic) || m32 == bits.ReverseBytes32(hamiMagic):
		return Region{}, fmt.Errorf("%w: written on a machine of the other byte order", ErrNotRegion)
	default:
		return Region{}, fmt.Errorf("%w: magic %#x (%s)", ErrNotRegion, m64, understood)
	}
}

// cString returns the bytes of b up to the first NUL.
func cString(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\x00")
	return s
}
