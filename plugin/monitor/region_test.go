package monitor

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/limitbed/limitbed/internal/fixtures"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/region"
)

// The layouts' own tests (every field, every refusal, the fuzz test) are in
// package region; these test the monitor's reading of region files.

func writeRegion(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), paths.UsageCacheName)
	if err := os.WriteFile(p, b, 0o666); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReadUsageErrorNamesFile: an unknown version is refused with an error
// that names the file, the version and the understood layouts.
func TestReadUsageErrorNamesFile(t *testing.T) {
	p := writeRegion(t, region.LimitbedSpec{Version: 3}.Bytes())
	_, err := RegionFiles{}.ReadUsage(p)
	if !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("err = %v", err)
	}
	for _, s := range []string{p, "version 3", "understood: limitbed v2", "hami-core v1.x"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("err = %q does not mention %q", err, s)
		}
	}
	if _, err := (RegionFiles{}).ReadUsage(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing file: %v", err)
	}
}

// TestReadUsageLockLiveness: liveness comes from the lock bytes, not from
// the slot state. A lock held through another open file description (as
// libvgpu's process holds it) makes its slot live; releasing it (what the
// kernel does when the owner dies) makes it dead at once.
func TestReadUsageLockLiveness(t *testing.T) {
	p := writeRegion(t, region.LimitbedSpec{
		Limits: map[int]uint64{0: 1 << 30}, UsedTotal: map[int]uint64{0: 30},
		Slots: []region.LimitbedSpecSlot{
			{Active: true, PID: 100, Used: map[int]uint64{0: 10}},
			{Active: true, PID: 101, Used: map[int]uint64{0: 20}},
		},
	}.Bytes())
	owner, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	lock := func(typ int16, slot int) {
		t.Helper()
		lk := unix.Flock_t{Type: typ, Whence: io.SeekStart, Start: int64(slotLockByteOffset + slot), Len: 1}
		if err := unix.FcntlFlock(owner.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
			t.Fatal(err)
		}
	}
	lock(unix.F_WRLCK, 1)
	u, err := RegionFiles{}.ReadUsage(p)
	if err != nil {
		t.Fatal(err)
	}
	if live := u.Live(); len(live) != 1 || live[0].PID != 101 || live[0].Index != 1 || u.DeadSlots() != 1 ||
		u.Devices[0].UsedBytes != 30 || u.Devices[0].LiveBytes != 20 {
		t.Fatalf("slot 1 locked: %+v", u)
	}
	lock(unix.F_UNLCK, 1)
	if u, err = (RegionFiles{}).ReadUsage(p); err != nil {
		t.Fatal(err)
	}
	if len(u.Live()) != 0 || u.DeadSlots() != 2 || u.Devices[0].LiveBytes != 0 {
		t.Fatalf("no lock held: %+v", u)
	}
}

// TestReadUsageHAMiCore: a region written by upstream HAMi-core is read from
// its file as it is (2008953 bytes, more than limitbed's), without a lock query.
func TestReadUsageHAMiCore(t *testing.T) {
	p := writeRegion(t, fixtures.Read(t, "hami-core-region/live-1024mib.cache.gz"))
	u, err := RegionFiles{}.ReadUsage(p)
	if err != nil {
		t.Fatal(err)
	}
	const mib = 1 << 20
	if u.Layout != region.HAMiCoreLayout || len(u.Devices) != 1 || u.Devices[0].UsedBytes != 1324*mib ||
		u.Devices[0].LimitBytes != 3000*mib || len(u.Live()) != 1 || u.Live()[0].PID != 5441 {
		t.Fatalf("HAMi-core region read as %+v", u)
	}
}
