package monitor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// The usage region's layout belongs to hamicore: hamicore/include/limitbed/region.h
// is the single source of truth and docs/usage-cache.md describes it.
// TestLayoutMatchesRegionH compiles a program against region.h and compares
// every offset and size below with the C compiler's, so the two cannot drift.
// A new layout version needs new constants here and a new case in DecodeRegion.

// SupportedRegionVersions are the region layout versions DecodeRegion reads.
var SupportedRegionVersions = []uint32{2}

// Layout constants of region version 2 (region.h).
const (
	regionMagic      = 0x004547415355424C                               // LB_REGION_MAGIC: "LBUSAGE\0" little-endian
	regionVersion    = 2                                                // LB_REGION_VERSION
	regionHeaderSize = 1024                                             // LB_REGION_HEADER_SIZE = offset of slot 0
	regionSlotSize   = 192                                              // LB_REGION_SLOT_SIZE
	regionMaxDevices = 16                                               // LB_REGION_MAX_DEVICES
	regionMaxSlots   = 1024                                             // LB_REGION_MAX_SLOTS
	regionLockOffset = regionHeaderSize + regionMaxSlots*regionSlotSize // LB_REGION_LOCK_OFFSET
	regionLockBytes  = 1 + regionMaxSlots                               // LB_REGION_LOCK_BYTES
	regionFileSize   = (regionLockOffset + regionLockBytes + 4095) &^ 4095

	// struct lb_region_header
	offMagic        = 0
	offVersion      = 8
	offHeaderSize   = 12
	offFileSize     = 16
	offMaxDevices   = 24
	offMaxSlots     = 28
	offSlotSizeHdr  = 32
	offLockOffset   = 36
	offCreatorPID   = 40
	offLimitsFormat = 44
	offSlotHWM      = 48
	offPolicy       = 52
	offPriority     = 56
	offFlags        = 60
	offMemLimit     = 64  // u64[16]
	offSMLimit      = 192 // u32[16]
	offMutex        = 256 // 64 opaque bytes
	offUsedTotal    = 320 // u64[16]
	offUtilSwitch   = 448
	offHdrReserved0 = 452
	offRecentKernel = 456
	offHdrReserved1 = 460
	offDevUUID      = 464 // [16][16]byte
	offHdrReserved  = 720 // u64[38]
	mutexBytes      = 64
	hdrReservedN    = 38
	uuidBytes       = 16

	// struct lb_region_slot
	offSlotState     = 0
	offSlotPID       = 4
	offSlotHostPID   = 8
	offSlotReserved0 = 12
	offSlotClaimedAt = 16
	offSlotReserved1 = 24  // u64[3]
	offSlotUsed      = 48  // u64[16]
	offSlotReserved2 = 176 // u64[2]

	slotStateFree      = 0          // LB_SLOT_FREE
	slotStateActive    = 1          // LB_SLOT_ACTIVE
	flagOversubscribe  = 1          // LB_FLAG_OVERSUBSCRIBE
	flagOverflowSeen   = 2          // LB_FLAG_OVERFLOW_SEEN
	memUnlimited       = ^uint64(0) // LB_MEM_UNLIMITED
	policyDefault      = 0          // LB_POLICY_DEFAULT
	policyForce        = 1          // LB_POLICY_FORCE
	policyDisable      = 2          // LB_POLICY_DISABLE
	regionMinReadSize  = regionHeaderSize
	slotLockByteOffset = regionLockOffset + 1 // slot i's lock byte: regionLockOffset + 1 + i
)

// Usage is what the monitor exports for one container.
type Usage struct {
	Version uint32
	Devices []DeviceUsage
	// Processes are the live slots: active, and their lock byte is held.
	Processes []Process
	// DeadSlots are active slots whose owner is gone (nobody holds the lock
	// byte) and that no process has reclaimed yet. Their bytes are still in
	// UsedBytes until libvgpu reclaims them.
	DeadSlots int
	// Overflow is LB_FLAG_OVERFLOW_SEEN: a process accounted outside the
	// slots, so UsedBytes may hold bytes of no slot.
	Overflow      bool
	Oversubscribe bool
	Policy        uint32
	Priority      int32
	UtilSwitch    uint32
}

// DeviceUsage is one device of a container, by CUDA ordinal.
type DeviceUsage struct {
	Index int
	// LimitBytes is the stamped memory limit; Unlimited is set instead when
	// the device has none. A limit of 0 means every allocation is refused.
	LimitBytes uint64
	Unlimited  bool
	// UsedBytes is used_total: what every process of the container has
	// reserved, the counter libvgpu checks the limit against.
	UsedBytes uint64
	// LiveBytes is the sum of used[] over the live slots only.
	LiveBytes uint64
	SMLimit   uint32 // percent, 100 = no compute limit
}

// Process is one live slot of a region.
type Process struct {
	Slot      int
	PID       int32 // in the process's own PID namespace
	HostPID   int32 // 0 = unknown
	ClaimedAt uint64
}

// SlotLiveness reports whether the owner of slot i holds its lock byte.
type SlotLiveness func(slot int) (bool, error)

// ErrNotRegion is returned for data that is not a usage region.
var ErrNotRegion = errors.New("not a usage region")

// ErrUnsupportedVersion is returned for a region of a layout version this
// monitor does not know.
var ErrUnsupportedVersion = errors.New("unsupported usage region layout version")

// DecodeRegion decodes a usage region. live decides, for each active slot,
// whether its owner still runs; nil counts every active slot as live.
// Devices without a limit and without usage are left out.
func DecodeRegion(b []byte, live SlotLiveness) (Usage, error) {
	ne := binary.NativeEndian // the region is in the writing machine's byte order
	if len(b) < regionMinReadSize {
		return Usage{}, fmt.Errorf("%w: %d bytes", ErrNotRegion, len(b))
	}
	switch m := ne.Uint64(b[offMagic:]); m {
	case regionMagic:
	case 0:
		return Usage{}, fmt.Errorf("%w: not initialised yet (magic 0)", ErrNotRegion)
	case bits.ReverseBytes64(regionMagic):
		return Usage{}, fmt.Errorf("%w: written on a machine of the other byte order", ErrNotRegion)
	default:
		return Usage{}, fmt.Errorf("%w: magic %#x", ErrNotRegion, m)
	}
	switch v := ne.Uint32(b[offVersion:]); v {
	case regionVersion:
		return decodeV2(b, live)
	default:
		return Usage{}, fmt.Errorf("%w: version %d (supported: %v)", ErrUnsupportedVersion, v, SupportedRegionVersions)
	}
}

func decodeV2(b []byte, live SlotLiveness) (Usage, error) {
	ne := binary.NativeEndian
	if len(b) != regionFileSize {
		return Usage{}, fmt.Errorf("version 2 region is %d bytes, want %d", len(b), regionFileSize)
	}
	for _, f := range []struct {
		name      string
		got, want uint64
	}{
		{"header_size", uint64(ne.Uint32(b[offHeaderSize:])), regionHeaderSize},
		{"file_size", ne.Uint64(b[offFileSize:]), regionFileSize},
		{"max_devices", uint64(ne.Uint32(b[offMaxDevices:])), regionMaxDevices},
		{"max_slots", uint64(ne.Uint32(b[offMaxSlots:])), regionMaxSlots},
		{"slot_size", uint64(ne.Uint32(b[offSlotSizeHdr:])), regionSlotSize},
		{"lock_offset", uint64(ne.Uint32(b[offLockOffset:])), regionLockOffset},
	} {
		if f.got != f.want {
			return Usage{}, fmt.Errorf("version 2 region has %s %d, want %d", f.name, f.got, f.want)
		}
	}
	flags := ne.Uint32(b[offFlags:])
	u := Usage{
		Version:       regionVersion,
		Overflow:      flags&flagOverflowSeen != 0,
		Oversubscribe: flags&flagOversubscribe != 0,
		Policy:        ne.Uint32(b[offPolicy:]),
		Priority:      int32(ne.Uint32(b[offPriority:])),
		UtilSwitch:    ne.Uint32(b[offUtilSwitch:]),
	}
	hwm := int(ne.Uint32(b[offSlotHWM:]))
	if hwm > regionMaxSlots {
		hwm = regionMaxSlots // a corrupt counter must not walk past the slots
	}
	var liveBytes [regionMaxDevices]uint64
	for i := 0; i < hwm; i++ {
		slot := b[regionHeaderSize+i*regionSlotSize:]
		if ne.Uint32(slot[offSlotState:]) != slotStateActive {
			continue
		}
		alive := true
		if live != nil {
			var err error
			if alive, err = live(i); err != nil {
				return Usage{}, fmt.Errorf("liveness of slot %d: %w", i, err)
			}
		}
		if !alive {
			u.DeadSlots++
			continue
		}
		u.Processes = append(u.Processes, Process{
			Slot: i, PID: int32(ne.Uint32(slot[offSlotPID:])), HostPID: int32(ne.Uint32(slot[offSlotHostPID:])),
			ClaimedAt: ne.Uint64(slot[offSlotClaimedAt:]),
		})
		for d := 0; d < regionMaxDevices; d++ {
			liveBytes[d] += ne.Uint64(slot[offSlotUsed+8*d:])
		}
	}
	for d := 0; d < regionMaxDevices; d++ {
		limit := ne.Uint64(b[offMemLimit+8*d:])
		used := ne.Uint64(b[offUsedTotal+8*d:])
		if limit == memUnlimited && used == 0 && liveBytes[d] == 0 {
			continue
		}
		u.Devices = append(u.Devices, DeviceUsage{
			Index: d, LimitBytes: limit, Unlimited: limit == memUnlimited, UsedBytes: used, LiveBytes: liveBytes[d],
			SMLimit: ne.Uint32(b[offSMLimit+4*d:]),
		})
	}
	return u, nil
}
