package monitor

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/limitbed/limitbed/plugin/internal/safefile"
	"github.com/limitbed/limitbed/plugin/region"
)

// UsageReader reads the usage of one container from its usage.cache.
type UsageReader interface {
	ReadUsage(path string) (Usage, error)
}

// RegionFiles reads usage regions from files and decides slot liveness
// from the region's lock bytes, as libvgpu does: the owner of slot i holds
// a write lock on byte lock_offset+1+i for as long as it lives, and
// the kernel drops it when the process dies, however it dies. The query
// (F_OFD_GETLK, F_WRLCK, one byte) works from any PID namespace, needs only
// a read-only descriptor and takes no lock, so the monitor never disturbs
// the processes it watches.
type RegionFiles struct{}

var _ UsageReader = RegionFiles{}

// regionFileSizes bound what is opened and read: from the smallest to the
// largest file of the layouts DecodeRegion reads (limitbed v2 and upstream
// HAMi-core's); the decoder then checks the exact size of its layout.
var regionFileSizes = safefile.Size{Min: min(region.LimitbedFileSize, maxRegionFileSize), Max: maxRegionFileSize}

// ReadUsage implements UsageReader. Errors name the file.
func (RegionFiles) ReadUsage(path string) (Usage, error) {
	// The container owns this path: safefile opens only a regular file of
	// a size the decoder knows, without following a link or blocking.
	f, _, err := safefile.Open(path, regionFileSizes)
	if err != nil {
		return Usage{}, fmt.Errorf("open usage region: %w", err)
	}
	defer f.Close()
	b, err := safefile.ReadAll(f, regionFileSizes)
	if err != nil {
		return Usage{}, fmt.Errorf("read usage region: %w", err)
	}
	u, err := DecodeRegion(b, func(slot int) (bool, error) { return slotLocked(f, slot) })
	if err != nil {
		return Usage{}, fmt.Errorf("usage region %s: %w", path, err)
	}
	return u, nil
}

// slotLocked reports whether some process holds the lock byte of slot.
// libvgpu takes open file description locks (older builds took POSIX ones;
// the two kinds conflict, so F_OFD_GETLK sees either); unlike F_GETLK it
// never reports a lock of this process as free (the monitor holds none, but
// a test may share it).
func slotLocked(f *os.File, slot int) (bool, error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: int64(slotLockByteOffset + slot), Len: 1}
	for {
		err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("F_OFD_GETLK on byte %d: %w", lk.Start, err)
		}
		return lk.Type != unix.F_UNLCK, nil
	}
}
