package monitor

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Decoder reads a container's usage.cache. The layout belongs to hamicore
// (hamicore/include/limitbed/region.h, the single source of truth); this
// package only needs the fields below, so a layout change is a new
// Decoder, selected by the version it reports.
type Decoder interface {
	Decode(b []byte) (Usage, error)
}

// Usage is what the monitor exports for one container.
type Usage struct {
	Devices []DeviceUsage
}

// DeviceUsage is one device of a container, by CUDA ordinal.
type DeviceUsage struct {
	Index int
	// LimitBytes is the stamped memory limit; Unlimited is set instead when
	// the device has none.
	LimitBytes uint64
	Unlimited  bool
	UsedBytes  uint64 // sum over the region's active slots
	SMLimit    uint32 // percent, 100 = no compute limit
}

// Layout constants of region version 1 (region.h).
const (
	regionMagic       = 0x004547415355424C // "LBUSAGE\0" little-endian
	regionVersion     = 1
	regionHeaderSize  = 1024
	regionSlotSize    = 192
	regionMaxDevices  = 16
	regionMaxSlots    = 1024
	regionFileSize    = 200704
	offVersion        = 8
	offSlotHWM        = 48
	offMemLimit       = 64
	offSMLimit        = 192
	offSlotState      = 0
	offSlotUsed       = 48
	slotStateActive   = 1
	memUnlimited      = ^uint64(0)
	regionMinReadSize = regionHeaderSize
)

// RegionV1 decodes region version 1.
type RegionV1 struct{}

var _ Decoder = RegionV1{}

// ErrNotRegion is returned for data that is not a usage region.
var ErrNotRegion = errors.New("not a usage region")

// Decode implements Decoder. Devices without a limit and without usage
// are left out.
func (RegionV1) Decode(b []byte) (Usage, error) {
	le := binary.LittleEndian
	if len(b) < regionMinReadSize {
		return Usage{}, fmt.Errorf("%w: %d bytes", ErrNotRegion, len(b))
	}
	if m := le.Uint64(b); m != regionMagic {
		return Usage{}, fmt.Errorf("%w: magic %#x", ErrNotRegion, m)
	}
	if v := le.Uint32(b[offVersion:]); v != regionVersion {
		return Usage{}, fmt.Errorf("usage region version %d is not supported (want %d)", v, regionVersion)
	}
	if len(b) < regionFileSize {
		return Usage{}, fmt.Errorf("usage region is %d bytes, want %d", len(b), regionFileSize)
	}
	hwm := int(le.Uint32(b[offSlotHWM:]))
	if hwm > regionMaxSlots {
		hwm = regionMaxSlots // a corrupt counter must not walk past the slots
	}
	var used [regionMaxDevices]uint64
	for i := 0; i < hwm; i++ {
		slot := b[regionHeaderSize+i*regionSlotSize:]
		if le.Uint32(slot[offSlotState:]) != slotStateActive {
			continue
		}
		for d := 0; d < regionMaxDevices; d++ {
			used[d] += le.Uint64(slot[offSlotUsed+8*d:])
		}
	}
	var u Usage
	for d := 0; d < regionMaxDevices; d++ {
		limit := le.Uint64(b[offMemLimit+8*d:])
		if limit == memUnlimited && used[d] == 0 {
			continue
		}
		u.Devices = append(u.Devices, DeviceUsage{
			Index: d, LimitBytes: limit, Unlimited: limit == memUnlimited, UsedBytes: used[d],
			SMLimit: le.Uint32(b[offSMLimit+4*d:]),
		})
	}
	return u, nil
}
