package region

import "encoding/binary"

// LimitbedSpec describes a limitbed v2 region for tests: the decoder's
// inverse, kept beside the layout so that no test repeats an offset.
type LimitbedSpec struct {
	Version   uint32             // 0 = 2
	Limits    map[int]uint64     // mem_limit by GPU index; others unlimited
	SMLimits  map[int]uint32     // sm_limit; others 100
	UsedTotal map[int]uint64     // used_total
	Flags     uint32             // header flags (bit 0 oversubscribe, bit 1 overflow seen)
	Priority  int32              // CUDA_TASK_PRIORITY; 0 = 1
	Recent    uint32             // recent_kernel
	GPUs      [][16]byte         // dev_uuid, in order
	CalibAt   uint64             // calib_at
	Work      map[int]uint32     // work_factor, thousandths
	Slots     []LimitbedSpecSlot // slot_hwm = len(Slots)
}

// LimitbedSpecSlot is one slot of a LimitbedSpec.
type LimitbedSpecSlot struct {
	Active  bool
	PID     int32
	HostPID int32
	Used    map[int]uint64
}

// Bytes renders the region file. The slot just past slot_hwm is active and
// holds 1 TiB, so a decoder that scans past slot_hwm shows it.
func (s LimitbedSpec) Bytes() []byte {
	b := make([]byte, limitbedFileSize)
	ne := binary.NativeEndian
	v := s.Version
	if v == 0 {
		v = limitbedVersion
	}
	ne.PutUint64(b[lbOffMagic:], limitbedMagic)
	ne.PutUint32(b[lbOffVersion:], v)
	ne.PutUint32(b[lbOffHeaderSize:], lbHeaderSize)
	ne.PutUint64(b[lbOffFileSize:], limitbedFileSize)
	ne.PutUint32(b[lbOffMaxDevices:], lbMaxDevices)
	ne.PutUint32(b[lbOffMaxSlots:], lbMaxSlots)
	ne.PutUint32(b[lbOffSlotSizeHdr:], lbSlotSize)
	ne.PutUint32(b[lbOffLockOffset:], lbLockOffset)
	ne.PutUint32(b[lbOffSlotHWM:], uint32(len(s.Slots)))
	prio := s.Priority
	if prio == 0 {
		prio = 1
	}
	ne.PutUint32(b[lbOffPriority:], uint32(prio))
	ne.PutUint32(b[lbOffRecentKernel:], s.Recent)
	for i, u := range s.GPUs {
		copy(b[lbOffDevUUID+i*lbUUIDBytes:], u[:])
	}
	ne.PutUint32(b[lbOffFlags:], s.Flags)
	ne.PutUint32(b[lbOffUtilSwitch:], 1)
	for d := range MaxDevices {
		ne.PutUint64(b[lbOffMemLimit+8*d:], lbMemUnlimited)
		ne.PutUint32(b[lbOffSMLimit+4*d:], 100)
	}
	for d, v := range s.Limits {
		ne.PutUint64(b[lbOffMemLimit+8*d:], v)
	}
	for d, v := range s.SMLimits {
		ne.PutUint32(b[lbOffSMLimit+4*d:], v)
	}
	ne.PutUint64(b[lbOffCalibAt:], s.CalibAt)
	for d, v := range s.Work {
		ne.PutUint32(b[lbOffWorkFactor+4*d:], v)
	}
	for d, v := range s.UsedTotal {
		ne.PutUint64(b[lbOffUsedTotal+8*d:], v)
	}
	for i, sl := range s.Slots {
		slot := b[lbHeaderSize+i*lbSlotSize:]
		if sl.Active {
			ne.PutUint32(slot[lbOffSlotState:], lbSlotActive)
		}
		ne.PutUint32(slot[lbOffSlotPID:], uint32(sl.PID))
		ne.PutUint32(slot[lbOffSlotHostPID:], uint32(sl.HostPID))
		for d, v := range sl.Used {
			ne.PutUint64(slot[lbOffSlotUsed+8*d:], v)
		}
	}
	if len(s.Slots) < lbMaxSlots {
		beyond := b[lbHeaderSize+len(s.Slots)*lbSlotSize:]
		ne.PutUint32(beyond[lbOffSlotState:], lbSlotActive)
		ne.PutUint64(beyond[lbOffSlotUsed:], 1<<40)
	}
	return b
}
