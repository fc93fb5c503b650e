package monitor

import "github.com/limitbed/limitbed/plugin/region"

// The usage region's layouts (limitbed's own and upstream HAMi-core's) and
// their decoding belong to package region; the monitor reads the file
// (regionfile.go), answers the lock-byte liveness query and hands the bytes
// over, so a container of either library gets its metrics.

// Usage is what the monitor exports for one container: its decoded region.
type Usage = region.Region

// SlotLiveness reports whether the owner of slot i holds its lock byte.
type SlotLiveness func(slot int) (bool, error)

// ErrNotRegion and ErrUnsupportedVersion are region's errors.
var (
	ErrNotRegion          = region.ErrNotRegion
	ErrUnsupportedVersion = region.ErrUnsupportedVersion
)

// maxRegionFileSize bounds the read: the largest region of any layout.
const maxRegionFileSize = region.MaxFileSize

// slotLockByteOffset is limitbed's lock byte of slot 0; slot i's is +i.
var slotLockByteOffset = int(region.LockByte(0))

// DecodeRegion decodes a usage region of any understood layout. live decides,
// for layouts with lock bytes, whether each active slot's owner still runs;
// nil counts every active slot as live.
func DecodeRegion(b []byte, live SlotLiveness) (Usage, error) {
	return region.Decode(b, region.Options{SlotLocked: live})
}
