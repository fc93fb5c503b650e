package monitor

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/limitbed/limitbed/internal/cbuild"
)

// slotSpec is one slot of a test region.
type slotSpec struct {
	state uint32
	pid   int32
	used  map[int]uint64
}

// regionSpec describes a version 2 region for tests.
type regionSpec struct {
	limits    map[int]uint64
	sm        map[int]uint32
	usedTotal map[int]uint64
	flags     uint32
	slots     []slotSpec
}

func (s regionSpec) bytes() []byte {
	b := make([]byte, regionFileSize)
	ne := binary.NativeEndian
	ne.PutUint64(b[offMagic:], regionMagic)
	ne.PutUint32(b[offVersion:], regionVersion)
	ne.PutUint32(b[offHeaderSize:], regionHeaderSize)
	ne.PutUint64(b[offFileSize:], regionFileSize)
	ne.PutUint32(b[offMaxDevices:], regionMaxDevices)
	ne.PutUint32(b[offMaxSlots:], regionMaxSlots)
	ne.PutUint32(b[offSlotSizeHdr:], regionSlotSize)
	ne.PutUint32(b[offLockOffset:], regionLockOffset)
	ne.PutUint32(b[offSlotHWM:], uint32(len(s.slots)))
	ne.PutUint32(b[offPriority:], 1)
	ne.PutUint32(b[offFlags:], s.flags)
	ne.PutUint32(b[offUtilSwitch:], 1)
	for d := 0; d < regionMaxDevices; d++ {
		ne.PutUint64(b[offMemLimit+8*d:], memUnlimited)
		ne.PutUint32(b[offSMLimit+4*d:], 100)
	}
	for d, v := range s.limits {
		ne.PutUint64(b[offMemLimit+8*d:], v)
	}
	for d, v := range s.sm {
		ne.PutUint32(b[offSMLimit+4*d:], v)
	}
	for d, v := range s.usedTotal {
		ne.PutUint64(b[offUsedTotal+8*d:], v)
	}
	for i, sl := range s.slots {
		slot := b[regionHeaderSize+i*regionSlotSize:]
		ne.PutUint32(slot[offSlotState:], sl.state)
		ne.PutUint32(slot[offSlotPID:], uint32(sl.pid))
		for d, v := range sl.used {
			ne.PutUint64(slot[offSlotUsed+8*d:], v)
		}
	}
	// A slot beyond slot_hwm must never count, whatever it holds.
	beyond := b[regionHeaderSize+len(s.slots)*regionSlotSize:]
	ne.PutUint32(beyond[offSlotState:], slotStateActive)
	ne.PutUint64(beyond[offSlotUsed:], 1<<40)
	return b
}

func liveSet(slots ...int) SlotLiveness {
	return func(i int) (bool, error) {
		for _, s := range slots {
			if s == i {
				return true, nil
			}
		}
		return false, nil
	}
}

func TestDecodeRegion(t *testing.T) {
	const mib = 1 << 20
	two := regionSpec{
		limits: map[int]uint64{0: 3000 * mib}, sm: map[int]uint32{0: 50},
		usedTotal: map[int]uint64{0: 700 * mib, 1: 5},
		slots: []slotSpec{
			{state: slotStateActive, pid: 10, used: map[int]uint64{0: 500 * mib}},
			{state: slotStateFree, used: map[int]uint64{0: 1 << 30}}, // freed: never counts
			{state: slotStateActive, pid: 12, used: map[int]uint64{0: 200 * mib, 1: 5}},
		},
	}
	cases := []struct {
		name      string
		spec      regionSpec
		live      SlotLiveness
		devices   []DeviceUsage
		pids      []int32
		dead      int
		overflow  bool
		oversubsc bool
	}{
		{
			name: "all owners alive", spec: two, live: liveSet(0, 2),
			devices: []DeviceUsage{
				{Index: 0, LimitBytes: 3000 * mib, UsedBytes: 700 * mib, LiveBytes: 700 * mib, SMLimit: 50},
				{Index: 1, LimitBytes: memUnlimited, Unlimited: true, UsedBytes: 5, LiveBytes: 5, SMLimit: 100},
			},
			pids: []int32{10, 12},
		},
		{
			// The owner of slot 2 was killed: used_total keeps its bytes
			// until libvgpu reclaims the slot, but it is no live process.
			name: "one owner dead", spec: two, live: liveSet(0),
			devices: []DeviceUsage{
				{Index: 0, LimitBytes: 3000 * mib, UsedBytes: 700 * mib, LiveBytes: 500 * mib, SMLimit: 50},
				{Index: 1, LimitBytes: memUnlimited, Unlimited: true, UsedBytes: 5, LiveBytes: 0, SMLimit: 100},
			},
			pids: []int32{10}, dead: 1,
		},
		{
			name: "nil liveness counts active slots", spec: two, live: nil,
			devices: []DeviceUsage{
				{Index: 0, LimitBytes: 3000 * mib, UsedBytes: 700 * mib, LiveBytes: 700 * mib, SMLimit: 50},
				{Index: 1, LimitBytes: memUnlimited, Unlimited: true, UsedBytes: 5, LiveBytes: 5, SMLimit: 100},
			},
			pids: []int32{10, 12},
		},
		{
			// Bytes accounted outside the slots are in used_total only.
			name:     "overflow and oversubscribe flags",
			spec:     regionSpec{limits: map[int]uint64{0: 0}, usedTotal: map[int]uint64{0: 42}, flags: flagOverflowSeen | flagOversubscribe},
			devices:  []DeviceUsage{{Index: 0, LimitBytes: 0, UsedBytes: 42, SMLimit: 100}},
			overflow: true, oversubsc: true,
		},
		{name: "empty region", spec: regionSpec{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u, err := DecodeRegion(tc.spec.bytes(), tc.live)
			if err != nil {
				t.Fatal(err)
			}
			if u.Version != 2 || u.Overflow != tc.overflow || u.Oversubscribe != tc.oversubsc || u.DeadSlots != tc.dead {
				t.Errorf("usage = %+v", u)
			}
			if len(u.Devices) != len(tc.devices) {
				t.Fatalf("devices = %+v, want %+v", u.Devices, tc.devices)
			}
			for i := range tc.devices {
				if u.Devices[i] != tc.devices[i] {
					t.Errorf("device %d = %+v, want %+v", i, u.Devices[i], tc.devices[i])
				}
			}
			var pids []int32
			for _, p := range u.Processes {
				pids = append(pids, p.PID)
			}
			if !equal(pids, tc.pids) {
				t.Errorf("live pids = %v, want %v", pids, tc.pids)
			}
		})
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDecodeRegionRejects(t *testing.T) {
	good := regionSpec{}.bytes()
	ne := binary.NativeEndian
	with := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	cases := []struct {
		name    string
		data    []byte
		is      error
		mention string
	}{
		{"short", good[:100], ErrNotRegion, "100 bytes"},
		{"not initialised", with(func(b []byte) { ne.PutUint64(b, 0) }), ErrNotRegion, "magic 0"},
		{"other magic", with(func(b []byte) { b[0] = 'X' }), ErrNotRegion, "magic"},
		{"other byte order", with(func(b []byte) { ne.PutUint64(b, bits.ReverseBytes64(regionMagic)) }), ErrNotRegion, "byte order"},
		{"version 1", with(func(b []byte) { ne.PutUint32(b[offVersion:], 1) }), ErrUnsupportedVersion, "version 1 (supported: [2])"},
		{"version 3", with(func(b []byte) { ne.PutUint32(b[offVersion:], 3) }), ErrUnsupportedVersion, "version 3 (supported: [2])"},
		{"truncated", good[:regionFileSize-1], nil, "200703 bytes, want 200704"},
		{"too long", append(append([]byte(nil), good...), 0), nil, "200705 bytes"},
		{"header_size", with(func(b []byte) { ne.PutUint32(b[offHeaderSize:], 512) }), nil, "header_size 512"},
		{"file_size", with(func(b []byte) { ne.PutUint64(b[offFileSize:], 1) }), nil, "file_size 1"},
		{"max_devices", with(func(b []byte) { ne.PutUint32(b[offMaxDevices:], 8) }), nil, "max_devices 8"},
		{"max_slots", with(func(b []byte) { ne.PutUint32(b[offMaxSlots:], 2048) }), nil, "max_slots 2048"},
		{"slot_size", with(func(b []byte) { ne.PutUint32(b[offSlotSizeHdr:], 128) }), nil, "slot_size 128"},
		{"lock_offset", with(func(b []byte) { ne.PutUint32(b[offLockOffset:], 4096) }), nil, "lock_offset 4096"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeRegion(tc.data, nil)
			if err == nil {
				t.Fatal("accepted")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("err = %v, want %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("err = %q, want it to mention %q", err, tc.mention)
			}
		})
	}
}

func FuzzDecodeRegion(f *testing.F) {
	f.Add(regionSpec{slots: []slotSpec{{state: slotStateActive, used: map[int]uint64{0: 1}}}}.bytes())
	f.Add(regionSpec{}.bytes()[:2048])
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = DecodeRegion(b, liveSet(0)) // must not panic on any input
	})
}

func writeRegion(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), UsageCacheName)
	if err := os.WriteFile(p, b, 0o666); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReadUsageErrorNamesFile: an unknown version is refused with an error
// that names the file, the version and the supported ones.
func TestReadUsageErrorNamesFile(t *testing.T) {
	b := regionSpec{}.bytes()
	binary.NativeEndian.PutUint32(b[offVersion:], 3)
	p := writeRegion(t, b)
	_, err := RegionFiles{}.ReadUsage(p)
	if !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("err = %v", err)
	}
	for _, s := range []string{p, "version 3", "supported: [2]"} {
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
	p := writeRegion(t, regionSpec{
		limits: map[int]uint64{0: 1 << 30}, usedTotal: map[int]uint64{0: 30},
		slots: []slotSpec{
			{state: slotStateActive, pid: 100, used: map[int]uint64{0: 10}},
			{state: slotStateActive, pid: 101, used: map[int]uint64{0: 20}},
		},
	}.bytes())
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
	if len(u.Processes) != 1 || u.Processes[0].PID != 101 || u.Processes[0].Slot != 1 || u.DeadSlots != 1 ||
		u.Devices[0].UsedBytes != 30 || u.Devices[0].LiveBytes != 20 {
		t.Fatalf("slot 1 locked: %+v", u)
	}
	lock(unix.F_UNLCK, 1)
	if u, err = (RegionFiles{}).ReadUsage(p); err != nil {
		t.Fatal(err)
	}
	if len(u.Processes) != 0 || u.DeadSlots != 2 || u.Devices[0].LiveBytes != 0 {
		t.Fatalf("no lock held: %+v", u)
	}
}

// cLayout is what testdata/layout.c prints.
type cLayout struct {
	Fields    map[string][2]uint64 `json:"fields"`
	Sizes     map[string]uint64    `json:"sizes"`
	Constants map[string]uint64    `json:"constants"`
}

// TestLayoutMatchesRegionH compiles testdata/layout.c against
// hamicore/include/limitbed/region.h and compares every offset, size and
// constant the C compiler reports with the decoder's, so Go and C cannot
// drift. The fields must also tile each structure without a gap, so a field
// added to region.h but not listed in layout.c fails too.
func TestLayoutMatchesRegionH(t *testing.T) {
	root := cbuild.RepoRoot()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatalf("a C compiler (cc) is required: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "layout")
	out, err := exec.Command(cc, "-std=c11", "-Wall", "-Wextra", "-Werror",
		"-I", filepath.Join(root, "hamicore", "include"), "-o", bin, filepath.Join("testdata", "layout.c")).CombinedOutput()
	if err != nil {
		t.Fatalf("compile testdata/layout.c: %v\n%s", err, out)
	}
	out, err = exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run layout: %v", err)
	}
	var c cLayout
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("decode layout JSON: %v\n%s", err, out)
	}

	goFields := map[string][2]uint64{
		"header.magic":         {offMagic, 8},
		"header.version":       {offVersion, 4},
		"header.header_size":   {offHeaderSize, 4},
		"header.file_size":     {offFileSize, 8},
		"header.max_devices":   {offMaxDevices, 4},
		"header.max_slots":     {offMaxSlots, 4},
		"header.slot_size":     {offSlotSizeHdr, 4},
		"header.lock_offset":   {offLockOffset, 4},
		"header.creator_pid":   {offCreatorPID, 4},
		"header.limits_format": {offLimitsFormat, 4},
		"header.slot_hwm":      {offSlotHWM, 4},
		"header.policy":        {offPolicy, 4},
		"header.priority":      {offPriority, 4},
		"header.flags":         {offFlags, 4},
		"header.mem_limit":     {offMemLimit, 8 * regionMaxDevices},
		"header.sm_limit":      {offSMLimit, 4 * regionMaxDevices},
		"header.mutex":         {offMutex, mutexBytes},
		"header.used_total":    {offUsedTotal, 8 * regionMaxDevices},
		"header.util_switch":   {offUtilSwitch, 4},
		"header.reserved0":     {offHdrReserved0, 4},
		"header.recent_kernel": {offRecentKernel, 4},
		"header.reserved1":     {offHdrReserved1, 4},
		"header.dev_uuid":      {offDevUUID, uuidBytes * regionMaxDevices},
		"header.reserved":      {offHdrReserved, 8 * hdrReservedN},
		"slot.state":           {offSlotState, 4},
		"slot.pid":             {offSlotPID, 4},
		"slot.hostpid":         {offSlotHostPID, 4},
		"slot.reserved0":       {offSlotReserved0, 4},
		"slot.claimed_at":      {offSlotClaimedAt, 8},
		"slot.reserved1":       {offSlotReserved1, 8 * 3},
		"slot.used":            {offSlotUsed, 8 * regionMaxDevices},
		"slot.reserved2":       {offSlotReserved2, 8 * 2},
	}
	for name, cf := range c.Fields {
		gf, ok := goFields[name]
		if !ok {
			t.Errorf("region.h field %s (offset %d, size %d) is unknown to the Go decoder", name, cf[0], cf[1])
			continue
		}
		if gf != cf {
			t.Errorf("%s: Go has offset %d size %d, region.h has offset %d size %d", name, gf[0], gf[1], cf[0], cf[1])
		}
	}
	for name := range goFields {
		if _, ok := c.Fields[name]; !ok {
			t.Errorf("Go decoder field %s is not in region.h (testdata/layout.c)", name)
		}
	}
	for _, st := range []struct {
		prefix string
		size   uint64
	}{{"header.", regionHeaderSize}, {"slot.", regionSlotSize}} {
		if c.Sizes[strings.TrimSuffix(st.prefix, ".")] != st.size {
			t.Errorf("sizeof %s: region.h %d, Go %d", st.prefix, c.Sizes[strings.TrimSuffix(st.prefix, ".")], st.size)
		}
		covered := make([]int, st.size)
		for name, f := range c.Fields {
			if !strings.HasPrefix(name, st.prefix) {
				continue
			}
			for o := f[0]; o < f[0]+f[1] && o < st.size; o++ {
				covered[o]++
			}
		}
		for o, n := range covered {
			if n != 1 {
				t.Errorf("%s byte %d is covered by %d listed fields, want 1 (a field of region.h missing from testdata/layout.c?)", st.prefix, o, n)
				break
			}
		}
	}
	goConsts := map[string]uint64{
		"LB_REGION_MAGIC":       regionMagic,
		"LB_REGION_VERSION":     regionVersion,
		"LB_REGION_MAX_DEVICES": regionMaxDevices,
		"LB_REGION_MAX_SLOTS":   regionMaxSlots,
		"LB_REGION_HEADER_SIZE": regionHeaderSize,
		"LB_REGION_SLOT_SIZE":   regionSlotSize,
		"LB_REGION_LOCK_OFFSET": regionLockOffset,
		"LB_REGION_LOCK_BYTES":  regionLockBytes,
		"LB_REGION_FILE_SIZE":   regionFileSize,
		"LB_MEM_UNLIMITED":      memUnlimited,
		"LB_SLOT_FREE":          slotStateFree,
		"LB_SLOT_ACTIVE":        slotStateActive,
		"LB_POLICY_DEFAULT":     policyDefault,
		"LB_POLICY_FORCE":       policyForce,
		"LB_POLICY_DISABLE":     policyDisable,
		"LB_FLAG_OVERSUBSCRIBE": flagOversubscribe,
		"LB_FLAG_OVERFLOW_SEEN": flagOverflowSeen,
	}
	for name, want := range goConsts {
		got, ok := c.Constants[name]
		if !ok {
			t.Errorf("constant %s not printed by testdata/layout.c", name)
		} else if got != want {
			t.Errorf("%s: region.h %d, Go %d", name, got, want)
		}
	}
	if len(c.Constants) != len(goConsts) {
		t.Errorf("layout.c prints %d constants, Go knows %d", len(c.Constants), len(goConsts))
	}
	if !equal(SupportedRegionVersions, []uint32{uint32(c.Constants["LB_REGION_VERSION"])}) {
		t.Errorf("supported versions %v, region.h is version %d", SupportedRegionVersions, c.Constants["LB_REGION_VERSION"])
	}
}
