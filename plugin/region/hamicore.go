package region

import (
	"encoding/binary"
	"fmt"
)

// Upstream HAMi-core's shared_region_t (multiprocess_memory_limit.h of the
// v2.10 line, major 1 minor 2), x86-64 and arm64 offsets. The facts are in
// docs/usage-cache.md ("HAMi-core's layout"); TestHAMiCoreFixtures decodes
// regions written by an unmodified HAMi-core and checks every value, so a wrong
// offset fails there.
const (
	hamiMagic       = 19920718 // initialized_flag once the region is stamped
	hamiMajor       = 1
	hamiDevices     = MaxDevices
	hamiMaxSlots    = 1024
	hamiStructSize  = 2008952
	hamiFileSizeMax = hamiStructSize + 1 // upstream extends the file by writing one byte at sizeof(shared_region_t)

	hamiOffMajor       = 4  // u32
	hamiOffMinor       = 8  // u32
	hamiOffOwnerPID    = 16 // size_t: holder of sem
	hamiOffDeviceNum   = 56 // u64
	hamiOffUUIDs       = 64 // char[96] per device
	hamiUUIDSize       = 96
	hamiOffLimit       = 1600 // u64[16], bytes; 0 = no limit
	hamiOffSMLimit     = 1728 // u64[16], percent; 0 = not set
	hamiOffSlots       = 1856
	hamiSlotSize       = 1960
	hamiOffProcNum     = 2008896 // i32
	hamiOffUtilSwitch  = 2008900 // i32
	hamiOffRecentKern  = 2008904 // i32
	hamiOffPriority    = 2008908 // i32
	hamiOffLastKernel  = 2008912 // u64
	hamiOffSemPostinit = 2008920 // sem_t, 32 bytes, to the end of the struct

	// shrreg_proc_slot_t
	hamiSlotOffPID      = 0    // i32, container PID namespace; 0 = exited
	hamiSlotOffHostPID  = 4    // i32
	hamiSlotOffUsed     = 8    // device_memory_t[16], 64 bytes each
	hamiMemSize         = 64   // context_size, module_size, data_size, offset, total, 3 unused (u64 each)
	hamiMemOffContext   = 0    //
	hamiMemOffModule    = 8    //
	hamiMemOffData      = 16   //
	hamiMemOffTotal     = 32   //
	hamiSlotOffObserved = 1032 // monitorused: u64[16]
	hamiSlotOffUtil     = 1160 // device_util_t[16], 48 bytes each
	hamiSlotOffStatus   = 1928 // i32
	hamiSlotOffSeqlock  = 1936 // u64
)

// HAMiCoreLayout is upstream HAMi-core's layout as the v2.10 line writes it.
var HAMiCoreLayout = Layout{Name: NameHAMiCore, Major: hamiMajor, Minor: 2}

func decodeHAMi(b []byte, minor uint32) (Region, error) {
	ne := binary.NativeEndian
	if len(b) != hamiStructSize && len(b) != hamiFileSizeMax {
		return Region{}, fmt.Errorf("hami-core v%d.%d region is %d bytes, want %d or %d", hamiMajor, minor, len(b),
			hamiStructSize, hamiFileSizeMax)
	}
	r := Region{
		Layout:         Layout{Name: NameHAMiCore, Major: hamiMajor, Minor: minor},
		Size:           len(b),
		Priority:       int32(ne.Uint32(b[hamiOffPriority:])),
		UtilSwitch:     int32(ne.Uint32(b[hamiOffUtilSwitch:])),
		DeviceCount:    ne.Uint64(b[hamiOffDeviceNum:]),
		OwnerPID:       ne.Uint64(b[hamiOffOwnerPID:]),
		RecentKernel:   int32(ne.Uint32(b[hamiOffRecentKern:])),
		LastKernelTime: ne.Uint64(b[hamiOffLastKernel:]),
	}
	n := int(int32(ne.Uint32(b[hamiOffProcNum:])))
	n = max(0, min(n, hamiMaxSlots)) // a corrupt counter must not walk past the slots
	var used, live [MaxDevices]uint64
	for i := range n {
		slot := b[hamiOffSlots+i*hamiSlotSize:]
		s := Slot{
			Index: i, PID: int32(ne.Uint32(slot[hamiSlotOffPID:])), HostPID: int32(ne.Uint32(slot[hamiSlotOffHostPID:])),
			Status:   int32(ne.Uint32(slot[hamiSlotOffStatus:])),
			Parts:    new([MaxDevices]MemoryParts),
			Observed: new([MaxDevices]uint64),
		}
		s.Alive = s.PID != 0
		for d := range MaxDevices {
			m := slot[hamiSlotOffUsed+d*hamiMemSize:]
			s.Used[d] = ne.Uint64(m[hamiMemOffTotal:])
			s.Parts[d] = MemoryParts{
				Context: ne.Uint64(m[hamiMemOffContext:]),
				Module:  ne.Uint64(m[hamiMemOffModule:]),
				Data:    ne.Uint64(m[hamiMemOffData:]),
			}
			s.Observed[d] = ne.Uint64(slot[hamiSlotOffObserved+8*d:])
			used[d] += s.Used[d]
			if s.Alive {
				live[d] += s.Used[d]
			}
		}
		r.Slots = append(r.Slots, s)
	}
	for d := range MaxDevices {
		limit := ne.Uint64(b[hamiOffLimit+8*d:])
		if uint64(d) >= r.DeviceCount && limit == 0 && used[d] == 0 {
			continue
		}
		sm := ne.Uint64(b[hamiOffSMLimit+8*d:])
		if sm == 0 || sm > 100 {
			sm = 100 // upstream enforces nothing for 0 (not set) or >= 100
		}
		r.Devices = append(r.Devices, Device{
			Index: d, UUID: cString(b[hamiOffUUIDs+d*hamiUUIDSize : hamiOffUUIDs+(d+1)*hamiUUIDSize]),
			LimitBytes: limit, Unlimited: limit == 0, UsedBytes: used[d], LiveBytes: live[d], SMLimit: uint32(sm),
		})
	}
	return r, nil
}
