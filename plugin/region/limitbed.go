package region

import (
	"encoding/binary"
	"fmt"
)

// limitbed's layout belongs to hamicore: hamicore/include/limitbed/region.h is
// the single source of truth and docs/usage-cache.md describes it.
// TestLayoutMatchesRegionH compiles a program against region.h and compares
// every offset and size below with the C compiler's, so the two cannot drift.

const (
	limitbedMagic      = 0x004547415355424C                          // LB_REGION_MAGIC: "LBUSAGE\0" little-endian
	limitbedVersion    = 2                                           // LB_REGION_VERSION
	lbHeaderSize       = 1024                                        // LB_REGION_HEADER_SIZE = offset of slot 0
	lbSlotSize         = 192                                         // LB_REGION_SLOT_SIZE
	lbMaxDevices       = MaxDevices                                  // LB_REGION_MAX_DEVICES
	lbMaxSlots         = 1024                                        // LB_REGION_MAX_SLOTS
	lbLockOffset       = lbHeaderSize + lbMaxSlots*lbSlotSize        // LB_REGION_LOCK_OFFSET
	lbLockBytes        = 1 + lbMaxSlots                              // LB_REGION_LOCK_BYTES
	limitbedFileSize   = (lbLockOffset + lbLockBytes + 4095) &^ 4095 // LB_REGION_FILE_SIZE
	lbSlotLockByteBase = lbLockOffset + 1                            // slot i's lock byte: lock_offset + 1 + i

	// struct lb_region_header
	lbOffMagic        = 0
	lbOffVersion      = 8
	lbOffHeaderSize   = 12
	lbOffFileSize     = 16
	lbOffMaxDevices   = 24
	lbOffMaxSlots     = 28
	lbOffSlotSizeHdr  = 32
	lbOffLockOffset   = 36
	lbOffCreatorPID   = 40
	lbOffLimitsFormat = 44
	lbOffSlotHWM      = 48
	lbOffPolicy       = 52
	lbOffPriority     = 56
	lbOffFlags        = 60
	lbOffMemLimit     = 64  // u64[16]
	lbOffSMLimit      = 192 // u32[16]
	lbOffMutex        = 256 // 64 opaque bytes
	lbOffUsedTotal    = 320 // u64[16]
	lbOffUtilSwitch   = 448
	lbOffHdrReserved0 = 452
	lbOffRecentKernel = 456
	lbOffHdrReserved1 = 460
	lbOffDevUUID      = 464 // [16][16]byte
	lbOffCalibAt      = 720
	lbOffWorkFactor   = 728 // u32[16]
	lbOffHdrReserved  = 792 // u64[29]
	lbMutexBytes      = 64
	lbHdrReservedN    = 29
	lbUUIDBytes       = 16

	// struct lb_region_slot
	lbOffSlotState     = 0
	lbOffSlotPID       = 4
	lbOffSlotHostPID   = 8
	lbOffSlotReserved0 = 12
	lbOffSlotClaimedAt = 16
	lbOffSlotReserved1 = 24  // u64[3]
	lbOffSlotUsed      = 48  // u64[16]
	lbOffSlotReserved2 = 176 // u64[2]

	lbSlotFree          = 0          // LB_SLOT_FREE
	lbSlotActive        = 1          // LB_SLOT_ACTIVE
	lbFlagOversubscribe = 1          // LB_FLAG_OVERSUBSCRIBE
	lbFlagOverflowSeen  = 2          // LB_FLAG_OVERFLOW_SEEN
	lbMemUnlimited      = ^uint64(0) // LB_MEM_UNLIMITED
	lbPolicyDefault     = 0          // LB_POLICY_DEFAULT
	lbPolicyForce       = 1          // LB_POLICY_FORCE
	lbPolicyDisable     = 2          // LB_POLICY_DISABLE
)

// LimitbedLayout is limitbed's own layout, version 2.
var LimitbedLayout = Layout{Name: NameLimitbed, Major: limitbedVersion}

// LimitbedFileSize is the size of every limitbed v2 region file.
const LimitbedFileSize = limitbedFileSize

// LockByte is the file offset of the byte whose write lock the owner of
// limitbed slot i holds for as long as it lives (the kernel drops the lock when
// the process dies, however it dies).
func LockByte(slot int) int64 { return int64(lbSlotLockByteBase + slot) }

func decodeLimitbed(b []byte, opt Options) (Region, error) {
	ne := binary.NativeEndian
	if len(b) != limitbedFileSize {
		return Region{}, fmt.Errorf("limitbed v2 region is %d bytes, want %d", len(b), limitbedFileSize)
	}
	for _, f := range []struct {
		name      string
		got, want uint64
	}{
		{"header_size", uint64(ne.Uint32(b[lbOffHeaderSize:])), lbHeaderSize},
		{"file_size", ne.Uint64(b[lbOffFileSize:]), limitbedFileSize},
		{"max_devices", uint64(ne.Uint32(b[lbOffMaxDevices:])), lbMaxDevices},
		{"max_slots", uint64(ne.Uint32(b[lbOffMaxSlots:])), lbMaxSlots},
		{"slot_size", uint64(ne.Uint32(b[lbOffSlotSizeHdr:])), lbSlotSize},
		{"lock_offset", uint64(ne.Uint32(b[lbOffLockOffset:])), lbLockOffset},
	} {
		if f.got != f.want {
			return Region{}, fmt.Errorf("limitbed v2 region has %s %d, want %d", f.name, f.got, f.want)
		}
	}
	flags := ne.Uint32(b[lbOffFlags:])
	r := Region{
		Layout:        LimitbedLayout,
		Size:          len(b),
		Priority:      int32(ne.Uint32(b[lbOffPriority:])),
		UtilSwitch:    int32(ne.Uint32(b[lbOffUtilSwitch:])),
		RecentKernel:  int32(ne.Uint32(b[lbOffRecentKernel:])),
		Policy:        ne.Uint32(b[lbOffPolicy:]),
		CreatorPID:    int32(ne.Uint32(b[lbOffCreatorPID:])),
		LimitsFormat:  ne.Uint32(b[lbOffLimitsFormat:]),
		Oversubscribe: flags&lbFlagOversubscribe != 0,
		Overflow:      flags&lbFlagOverflowSeen != 0,
		CalibratedAt:  ne.Uint64(b[lbOffCalibAt:]),
	}
	hwm := int(ne.Uint32(b[lbOffSlotHWM:]))
	if hwm > lbMaxSlots {
		hwm = lbMaxSlots // a corrupt counter must not walk past the slots
	}
	var live [MaxDevices]uint64
	for i := 0; i < hwm; i++ {
		slot := b[lbHeaderSize+i*lbSlotSize:]
		if ne.Uint32(slot[lbOffSlotState:]) != lbSlotActive {
			continue
		}
		s := Slot{
			Index: i, PID: int32(ne.Uint32(slot[lbOffSlotPID:])), HostPID: int32(ne.Uint32(slot[lbOffSlotHostPID:])),
			Alive: true, ClaimedAt: ne.Uint64(slot[lbOffSlotClaimedAt:]),
		}
		if opt.SlotLocked != nil {
			var err error
			if s.Alive, err = opt.SlotLocked(i); err != nil {
				return Region{}, fmt.Errorf("liveness of slot %d: %w", i, err)
			}
		}
		for d := range MaxDevices {
			s.Used[d] = ne.Uint64(slot[lbOffSlotUsed+8*d:])
			if s.Alive {
				live[d] += s.Used[d]
			}
		}
		r.Slots = append(r.Slots, s)
	}
	for d := range MaxDevices {
		limit := ne.Uint64(b[lbOffMemLimit+8*d:])
		used := ne.Uint64(b[lbOffUsedTotal+8*d:])
		if limit == lbMemUnlimited && used == 0 && live[d] == 0 {
			continue
		}
		r.Devices = append(r.Devices, Device{
			Index: d, LimitBytes: limit, Unlimited: limit == lbMemUnlimited, UsedBytes: used, LiveBytes: live[d],
			SMLimit: ne.Uint32(b[lbOffSMLimit+4*d:]), WorkFactor: ne.Uint32(b[lbOffWorkFactor+4*d:]),
		})
	}
	return r, nil
}

// The header's size (what the monitor maps; its two words are written by mapped.go) and the
// size of a GPU's UUID in it.
const (
	LimitbedHeaderSize = lbHeaderSize
	UUIDBytes          = lbUUIDBytes
	// The words a tenant may forge (tests of the node's distrust of them): the priority and
	// the GPUs its processes launched on.
	LimitbedOffPriority = lbOffPriority
	LimitbedOffDevUUID  = lbOffDevUUID
)

// Compute is the compute part of a limitbed region header.
type Compute struct {
	Priority     int32
	Policy       uint32
	UtilSwitch   uint32
	RecentKernel uint32
	// GPUs are the UUIDs (16 raw bytes) of the GPUs the container's processes launched on, as
	// the first launching process stamped them; empty before any launch.
	GPUs [][UUIDBytes]byte
}

// DecodeLimitbedCompute reads the compute fields of a limitbed header (the first
// LimitbedHeaderSize bytes of a usage.cache). Errors wrap ErrNotRegion or ErrUnsupportedVersion.
func DecodeLimitbedCompute(b []byte) (Compute, error) {
	ne := binary.NativeEndian
	if len(b) < lbHeaderSize {
		return Compute{}, fmt.Errorf("%w: header is %d bytes, want %d", ErrNotRegion, len(b), lbHeaderSize)
	}
	if m := ne.Uint64(b[lbOffMagic:]); m != limitbedMagic {
		return Compute{}, fmt.Errorf("%w: magic %#x, want limitbed's %#x", ErrNotRegion, m, uint64(limitbedMagic))
	}
	if v := ne.Uint32(b[lbOffVersion:]); v != limitbedVersion {
		return Compute{}, fmt.Errorf("%w: limitbed version %d, want %d", ErrUnsupportedVersion, v, limitbedVersion)
	}
	c := Compute{
		Priority:     int32(ne.Uint32(b[lbOffPriority:])),
		Policy:       ne.Uint32(b[lbOffPolicy:]),
		UtilSwitch:   ne.Uint32(b[lbOffUtilSwitch:]),
		RecentKernel: ne.Uint32(b[lbOffRecentKernel:]),
	}
	var zero [UUIDBytes]byte
	for d := 0; d < lbMaxDevices; d++ {
		var u [UUIDBytes]byte
		copy(u[:], b[lbOffDevUUID+d*UUIDBytes:])
		if u != zero {
			c.GPUs = append(c.GPUs, u)
		}
	}
	return c, nil
}
