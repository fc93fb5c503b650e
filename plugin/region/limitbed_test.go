package region

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/bits"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
)

func liveSet(slots ...int) func(int) (bool, error) {
	return func(i int) (bool, error) { return slices.Contains(slots, i), nil }
}

func livePIDs(r Region) []int32 {
	var pids []int32
	for _, s := range r.Live() {
		pids = append(pids, s.PID)
	}
	return pids
}

func TestDecodeLimitbed(t *testing.T) {
	const mib = 1 << 20
	two := LimitbedSpec{
		Limits: map[int]uint64{0: 3000 * mib}, SMLimits: map[int]uint32{0: 50},
		UsedTotal: map[int]uint64{0: 700 * mib, 1: 5},
		Slots: []LimitbedSpecSlot{
			{Active: true, PID: 10, HostPID: 1010, Used: map[int]uint64{0: 500 * mib}},
			{Used: map[int]uint64{0: 1 << 30}}, // freed: never counts
			{Active: true, PID: 12, Used: map[int]uint64{0: 200 * mib, 1: 5}},
		},
	}
	cases := []struct {
		name      string
		spec      LimitbedSpec
		live      func(int) (bool, error)
		devices   []Device
		pids      []int32
		dead      int
		overflow  bool
		oversubsc bool
		calibAt   uint64
	}{
		{
			name: "all owners alive", spec: two, live: liveSet(0, 2),
			devices: []Device{
				{Index: 0, LimitBytes: 3000 * mib, UsedBytes: 700 * mib, LiveBytes: 700 * mib, SMLimit: 50},
				{Index: 1, LimitBytes: lbMemUnlimited, Unlimited: true, UsedBytes: 5, LiveBytes: 5, SMLimit: 100},
			},
			pids: []int32{10, 12},
		},
		{
			// The owner of slot 2 was killed: used_total keeps its bytes
			// until libvgpu reclaims the slot, but it is no live process.
			name: "one owner dead", spec: two, live: liveSet(0),
			devices: []Device{
				{Index: 0, LimitBytes: 3000 * mib, UsedBytes: 700 * mib, LiveBytes: 500 * mib, SMLimit: 50},
				{Index: 1, LimitBytes: lbMemUnlimited, Unlimited: true, UsedBytes: 5, LiveBytes: 0, SMLimit: 100},
			},
			pids: []int32{10}, dead: 1,
		},
		{
			name: "nil liveness counts active slots", spec: two, live: nil,
			devices: []Device{
				{Index: 0, LimitBytes: 3000 * mib, UsedBytes: 700 * mib, LiveBytes: 700 * mib, SMLimit: 50},
				{Index: 1, LimitBytes: lbMemUnlimited, Unlimited: true, UsedBytes: 5, LiveBytes: 5, SMLimit: 100},
			},
			pids: []int32{10, 12},
		},
		{
			// Bytes accounted outside the slots are in used_total only.
			name:     "overflow and oversubscribe flags",
			spec:     LimitbedSpec{Limits: map[int]uint64{0: 0}, UsedTotal: map[int]uint64{0: 42}, Flags: lbFlagOverflowSeen | lbFlagOversubscribe},
			devices:  []Device{{Index: 0, LimitBytes: 0, UsedBytes: 42, SMLimit: 100}},
			overflow: true, oversubsc: true,
		},
		{
			// The compute limiter's calibration stamp and measured work factor.
			name:    "calibrated compute limit",
			spec:    LimitbedSpec{Limits: map[int]uint64{0: 3000 * mib}, SMLimits: map[int]uint32{0: 30}, CalibAt: 1764590000, Work: map[int]uint32{0: 1203}},
			devices: []Device{{Index: 0, LimitBytes: 3000 * mib, SMLimit: 30, WorkFactor: 1203}},
			calibAt: 1764590000,
		},
		{name: "empty region", spec: LimitbedSpec{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Decode(tc.spec.Bytes(), Options{SlotLocked: tc.live})
			if err != nil {
				t.Fatal(err)
			}
			if r.Layout != LimitbedLayout || r.Layout.String() != "limitbed v2" || r.Size != LimitbedFileSize ||
				r.Overflow != tc.overflow || r.Oversubscribe != tc.oversubsc || r.DeadSlots() != tc.dead ||
				r.Priority != 1 || r.UtilSwitch != 1 || r.CalibratedAt != tc.calibAt {
				t.Errorf("region = %+v", r)
			}
			if !slices.Equal(r.Devices, tc.devices) {
				t.Errorf("devices = %+v, want %+v", r.Devices, tc.devices)
			}
			if pids := livePIDs(r); !slices.Equal(pids, tc.pids) {
				t.Errorf("live pids = %v, want %v", pids, tc.pids)
			}
		})
	}
	r, err := Decode(two.Bytes(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Slots[0]; s.Index != 0 || s.HostPID != 1010 || s.Used[0] != 500*mib || s.Parts != nil || s.Observed != nil {
		t.Errorf("slot 0 = %+v", s)
	}
	if s := r.Slots[1]; s.Index != 2 || s.Used[1] != 5 {
		t.Errorf("second active slot = %+v, want slot 2", s)
	}
}

func TestDecodeRejects(t *testing.T) {
	lb := LimitbedSpec{}.Bytes()
	hc := hamiFixture(t, "live-1024mib")
	ne := binary.NativeEndian
	with := func(base []byte, f func(b []byte)) []byte {
		b := slices.Clone(base)
		f(b)
		return b
	}
	const lists = "understood: limitbed v2 (magic 0x4547415355424c, 200704 bytes), hami-core v1.x (magic 19920718"
	cases := []struct {
		name    string
		data    []byte
		is      error
		mention []string
	}{
		{"short", lb[:10], ErrNotRegion, []string{"10 bytes", lists}},
		{"not initialised", with(lb, func(b []byte) { ne.PutUint64(b, 0) }), ErrNotRegion, []string{"magic 0"}},
		{"other magic", with(lb, func(b []byte) { b[0] = 'X' }), ErrNotRegion, []string{"magic 0x4547415355425", lists}},
		{"limitbed other byte order", with(lb, func(b []byte) { ne.PutUint64(b, bits.ReverseBytes64(limitbedMagic)) }), ErrNotRegion, []string{"byte order"}},
		{"hami-core other byte order", with(hc, func(b []byte) { ne.PutUint32(b, bits.ReverseBytes32(hamiMagic)) }), ErrNotRegion, []string{"byte order"}},
		{"limitbed version 1", with(lb, func(b []byte) { ne.PutUint32(b[lbOffVersion:], 1) }), ErrUnsupportedVersion, []string{"limitbed magic with version 1", lists}},
		{"limitbed version 3", with(lb, func(b []byte) { ne.PutUint32(b[lbOffVersion:], 3) }), ErrUnsupportedVersion, []string{"limitbed magic with version 3"}},
		{"hami-core major 2", with(hc, func(b []byte) { ne.PutUint32(b[hamiOffMajor:], 2) }), ErrUnsupportedVersion, []string{"hami-core magic with version 2.2", lists}},
		{"hami-core major 0", with(hc, func(b []byte) { ne.PutUint32(b[hamiOffMajor:], 0) }), ErrUnsupportedVersion, []string{"version 0.2"}},
		{"hami-core truncated", hc[:hamiStructSize-1], nil, []string{"hami-core v1.2 region is 2008951 bytes, want 2008952 or 2008953"}},
		{"hami-core too long", append(slices.Clone(hc), 0), nil, []string{"2008954 bytes"}},
		{"limitbed truncated", lb[:limitbedFileSize-1], nil, []string{"200703 bytes, want 200704"}},
		{"limitbed too long", append(slices.Clone(lb), 0), nil, []string{"200705 bytes"}},
		{"header_size", with(lb, func(b []byte) { ne.PutUint32(b[lbOffHeaderSize:], 512) }), nil, []string{"header_size 512"}},
		{"file_size", with(lb, func(b []byte) { ne.PutUint64(b[lbOffFileSize:], 1) }), nil, []string{"file_size 1"}},
		{"max_devices", with(lb, func(b []byte) { ne.PutUint32(b[lbOffMaxDevices:], 8) }), nil, []string{"max_devices 8"}},
		{"max_slots", with(lb, func(b []byte) { ne.PutUint32(b[lbOffMaxSlots:], 2048) }), nil, []string{"max_slots 2048"}},
		{"slot_size", with(lb, func(b []byte) { ne.PutUint32(b[lbOffSlotSizeHdr:], 128) }), nil, []string{"slot_size 128"}},
		{"lock_offset", with(lb, func(b []byte) { ne.PutUint32(b[lbOffLockOffset:], 4096) }), nil, []string{"lock_offset 4096"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.data, Options{})
			if err == nil {
				t.Fatal("accepted")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("err = %v, want %v", err, tc.is)
			}
			for _, m := range tc.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("err = %q, want it to mention %q", err, m)
				}
			}
		})
	}
}

// TestLivenessError: a failing lock query fails the decode, naming the slot.
func TestLivenessError(t *testing.T) {
	b := LimitbedSpec{Slots: []LimitbedSpecSlot{{Active: true, PID: 1}}}.Bytes()
	_, err := Decode(b, Options{SlotLocked: func(int) (bool, error) { return false, errors.New("EBADF") }})
	if err == nil || !strings.Contains(err.Error(), "liveness of slot 0: EBADF") {
		t.Fatalf("err = %v", err)
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
	bin := cbuild.Program(t, []string{"hamicore/include"}, filepath.Join("testdata", "layout.c"))
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run layout: %v", err)
	}
	var c cLayout
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("decode layout JSON: %v\n%s", err, out)
	}

	goFields := map[string][2]uint64{
		"header.magic":         {lbOffMagic, 8},
		"header.version":       {lbOffVersion, 4},
		"header.header_size":   {lbOffHeaderSize, 4},
		"header.file_size":     {lbOffFileSize, 8},
		"header.max_devices":   {lbOffMaxDevices, 4},
		"header.max_slots":     {lbOffMaxSlots, 4},
		"header.slot_size":     {lbOffSlotSizeHdr, 4},
		"header.lock_offset":   {lbOffLockOffset, 4},
		"header.creator_pid":   {lbOffCreatorPID, 4},
		"header.limits_format": {lbOffLimitsFormat, 4},
		"header.slot_hwm":      {lbOffSlotHWM, 4},
		"header.policy":        {lbOffPolicy, 4},
		"header.priority":      {lbOffPriority, 4},
		"header.flags":         {lbOffFlags, 4},
		"header.mem_limit":     {lbOffMemLimit, 8 * lbMaxDevices},
		"header.sm_limit":      {lbOffSMLimit, 4 * lbMaxDevices},
		"header.mutex":         {lbOffMutex, lbMutexBytes},
		"header.used_total":    {lbOffUsedTotal, 8 * lbMaxDevices},
		"header.util_switch":   {lbOffUtilSwitch, 4},
		"header.reserved0":     {lbOffHdrReserved0, 4},
		"header.recent_kernel": {lbOffRecentKernel, 4},
		"header.reserved1":     {lbOffHdrReserved1, 4},
		"header.dev_uuid":      {lbOffDevUUID, lbUUIDBytes * lbMaxDevices},
		"header.calib_at":      {lbOffCalibAt, 8},
		"header.work_factor":   {lbOffWorkFactor, 4 * lbMaxDevices},
		"header.reserved":      {lbOffHdrReserved, 8 * lbHdrReservedN},
		"slot.state":           {lbOffSlotState, 4},
		"slot.pid":             {lbOffSlotPID, 4},
		"slot.hostpid":         {lbOffSlotHostPID, 4},
		"slot.reserved0":       {lbOffSlotReserved0, 4},
		"slot.claimed_at":      {lbOffSlotClaimedAt, 8},
		"slot.reserved1":       {lbOffSlotReserved1, 8 * 3},
		"slot.used":            {lbOffSlotUsed, 8 * lbMaxDevices},
		"slot.reserved2":       {lbOffSlotReserved2, 8 * 2},
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
	}{{"header.", lbHeaderSize}, {"slot.", lbSlotSize}} {
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
		"LB_REGION_MAGIC":       limitbedMagic,
		"LB_REGION_VERSION":     limitbedVersion,
		"LB_REGION_MAX_DEVICES": lbMaxDevices,
		"LB_REGION_MAX_SLOTS":   lbMaxSlots,
		"LB_REGION_HEADER_SIZE": lbHeaderSize,
		"LB_REGION_SLOT_SIZE":   lbSlotSize,
		"LB_REGION_LOCK_OFFSET": lbLockOffset,
		"LB_REGION_LOCK_BYTES":  lbLockBytes,
		"LB_REGION_FILE_SIZE":   limitbedFileSize,
		"LB_MEM_UNLIMITED":      lbMemUnlimited,
		"LB_SLOT_FREE":          lbSlotFree,
		"LB_SLOT_ACTIVE":        lbSlotActive,
		"LB_POLICY_DEFAULT":     lbPolicyDefault,
		"LB_POLICY_FORCE":       lbPolicyForce,
		"LB_POLICY_DISABLE":     lbPolicyDisable,
		"LB_FLAG_OVERSUBSCRIBE": lbFlagOversubscribe,
		"LB_FLAG_OVERFLOW_SEEN": lbFlagOverflowSeen,
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
	if LimitbedLayout.Major != uint32(c.Constants["LB_REGION_VERSION"]) {
		t.Errorf("decoded layout %v, region.h is version %d", LimitbedLayout, c.Constants["LB_REGION_VERSION"])
	}
}
