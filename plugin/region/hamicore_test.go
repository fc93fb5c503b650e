package region

import (
	"reflect"
	"testing"

	"github.com/limitbed/limitbed/internal/fixtures"
)

func hamiFixture(t testing.TB, name string) []byte {
	t.Helper()
	return fixtures.Read(t, "hami-core-region/"+name+".cache.gz")
}

// TestHAMiCoreFixtures decodes the regions an unmodified HAMi-core (8f3a89c)
// wrote on fakegpu's a16-16q (../shared/fixtures/hami-core-region/README.md):
// CUDA_DEVICE_MEMORY_LIMIT_0=3000m, CUDA_DEVICE_SM_LIMIT=30, one process
// (pid 5441) holding a 1024 MiB cuMemAlloc plus the 300 MiB of context memory
// upstream charges on this profile (the process saw free = 3000-1024-300 =
// 1676 MiB). Every field is compared, so an offset that is off by one field
// reads a neighbour's value and fails.
func TestHAMiCoreFixtures(t *testing.T) {
	const (
		mib      = 1 << 20
		uuid     = "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50"
		lastKern = 1796110376 // last_kernel_time: the process's one launch, seconds since the epoch
	)
	hdr := func(devUsed uint64) Region {
		return Region{
			Layout: HAMiCoreLayout, Size: 2008953, // sizeof(shared_region_t) + the one byte upstream writes past it
			Devices:  []Device{{Index: 0, UUID: uuid, LimitBytes: 3000 * mib, UsedBytes: devUsed, LiveBytes: devUsed, SMLimit: 30}},
			Priority: 1, UtilSwitch: 1, DeviceCount: 1, RecentKernel: 2, LastKernelTime: lastKern,
		}
	}
	liveSlot := Slot{Index: 0, PID: 5441, HostPID: 5441, Alive: true, Status: 1,
		Parts: &[MaxDevices]MemoryParts{0: {Context: 300 * mib, Data: 1024 * mib}}, Observed: &[MaxDevices]uint64{0: 1324 * mib}}
	liveSlot.Used[0] = 1324 * mib
	live := hdr(1324 * mib)
	live.Slots = []Slot{liveSlot}

	// After the exit clean-up the slot keeps its host pid and NVML's last
	// observation, its pid and usage are 0; proc_num still counts it.
	gone := hdr(0)
	gone.Slots = []Slot{{Index: 0, PID: 0, HostPID: 5441, Alive: false, Status: 0,
		Parts: &[MaxDevices]MemoryParts{}, Observed: &[MaxDevices]uint64{0: 1324 * mib}}}

	for _, tc := range []struct {
		file       string
		want       Region
		live, dead int
	}{
		{"live-1024mib", live, 1, 0},
		{"after-exit", gone, 0, 1},
	} {
		t.Run(tc.file, func(t *testing.T) {
			// A lock query must never be asked: HAMi-core's layout has no lock bytes.
			r, err := Decode(hamiFixture(t, tc.file), Options{SlotLocked: func(int) (bool, error) {
				t.Fatal("lock query on a hami-core region")
				return false, nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r, tc.want) {
				t.Errorf("decoded\n %+v\nwant\n %+v", r, tc.want)
				for i := range min(len(r.Slots), len(tc.want.Slots)) {
					g, w := r.Slots[i], tc.want.Slots[i]
					t.Errorf("slot %d: %+v parts %+v observed %v\nwant %+v parts %+v observed %v", i, g, *g.Parts, *g.Observed, w, *w.Parts, *w.Observed)
				}
			}
			if len(r.Live()) != tc.live || r.DeadSlots() != tc.dead || r.Layout.String() != "hami-core v1.2" {
				t.Errorf("%v: live %d dead %d, want %d and %d", r.Layout, len(r.Live()), r.DeadSlots(), tc.live, tc.dead)
			}
		})
	}
}

// TestHAMiCoreLayoutTiles: the offsets of shared_region_t follow from the
// field sizes (x86-64 alignment), so a constant that is wrong on its own shows
// here even where the fixtures hold zeros.
func TestHAMiCoreLayoutTiles(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"uuids after device_num", hamiOffUUIDs, hamiOffDeviceNum + 8},
		{"limit after uuids", hamiOffLimit, hamiOffUUIDs + hamiDevices*hamiUUIDSize},
		{"sm_limit after limit", hamiOffSMLimit, hamiOffLimit + 8*hamiDevices},
		{"procs after sm_limit", hamiOffSlots, hamiOffSMLimit + 8*hamiDevices},
		{"proc_num after procs", hamiOffProcNum, hamiOffSlots + hamiMaxSlots*hamiSlotSize},
		{"utilization_switch", hamiOffUtilSwitch, hamiOffProcNum + 4},
		{"recent_kernel", hamiOffRecentKern, hamiOffUtilSwitch + 4},
		{"priority", hamiOffPriority, hamiOffRecentKern + 4},
		{"last_kernel_time", hamiOffLastKernel, hamiOffPriority + 4},
		{"sem_postinit", hamiOffSemPostinit, hamiOffLastKernel + 8},
		{"struct size", hamiStructSize, hamiOffSemPostinit + 32},
		{"slot monitorused after used", hamiSlotOffObserved, hamiSlotOffUsed + hamiDevices*hamiMemSize},
		{"slot device_util after monitorused", hamiSlotOffUtil, hamiSlotOffObserved + 8*hamiDevices},
		{"slot status after device_util", hamiSlotOffStatus, hamiSlotOffUtil + 48*hamiDevices},
		{"slot seqlock (8-aligned) after status", hamiSlotOffSeqlock, (hamiSlotOffStatus + 4 + 7) &^ 7},
		{"slot size", hamiSlotSize, hamiSlotOffSeqlock + 8 + 2*8},
	} {
		if c.got != c.want {
			t.Errorf("%s: offset %d, the fields before it end at %d", c.name, c.got, c.want)
		}
	}
}
