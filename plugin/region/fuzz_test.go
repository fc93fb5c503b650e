package region

import (
	"encoding/json"
	"slices"
	"testing"
)

// FuzzDecode decodes raw bytes, and valid regions of both layouts with fuzzed
// bytes written over them (counters, limits, slots), so the fuzzer reaches
// the slot loops that only a full-size file gets to. Whatever it decodes must
// be self-consistent and render as JSON (regiondump prints it).
func FuzzDecode(f *testing.F) {
	bases := [][]byte{
		LimitbedSpec{Limits: map[int]uint64{0: 1 << 30}, UsedTotal: map[int]uint64{0: 7},
			Slots: []LimitbedSpecSlot{{Active: true, PID: 3, Used: map[int]uint64{0: 7}}}}.Bytes(),
		hamiFixture(f, "live-1024mib"),
	}
	f.Add(uint8(0), uint32(lbOffSlotHWM), []byte{0xff, 0xff, 0, 0})
	f.Add(uint8(0), uint32(lbHeaderSize+lbOffSlotUsed), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint8(1), uint32(hamiOffProcNum), []byte{0xff, 0xff, 0xff, 0x7f})
	f.Add(uint8(1), uint32(hamiOffProcNum), []byte{0xff, 0xff, 0xff, 0xff})
	f.Add(uint8(1), uint32(hamiOffDeviceNum), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint8(1), uint32(hamiOffUUIDs), slices.Repeat([]byte{'A'}, 200))
	f.Add(uint8(2), uint32(0), []byte{0xce, 0xf7, 0x2f, 0x01, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint8(2), uint32(0), []byte("LBUSAGE\x00\x02\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, which uint8, off uint32, patch []byte) {
		b := patch
		if k := int(which % 3); k < len(bases) {
			b = slices.Clone(bases[k])
			copy(b[int(off)%len(b):], patch)
		}
		r, err := Decode(b, Options{SlotLocked: liveSet(0)})
		if err != nil {
			return
		}
		if len(r.Devices) > MaxDevices || len(r.Slots) > 1024 {
			t.Fatalf("%d devices, %d slots", len(r.Devices), len(r.Slots))
		}
		var used, live [MaxDevices]uint64
		for i, s := range r.Slots {
			if s.Index < 0 || s.Index >= 1024 || (i > 0 && s.Index <= r.Slots[i-1].Index) {
				t.Fatalf("slot indexes out of order: %d after %+v", s.Index, r.Slots[:i])
			}
			for d := range MaxDevices {
				used[d] += s.Used[d]
				if s.Alive {
					live[d] += s.Used[d]
				}
			}
		}
		for i, d := range r.Devices {
			if d.Index < 0 || d.Index >= MaxDevices || (i > 0 && d.Index <= r.Devices[i-1].Index) {
				t.Fatalf("device indexes out of order: %+v", r.Devices)
			}
			if d.LiveBytes != live[d.Index] || (r.Layout.Name == NameHAMiCore && d.UsedBytes != used[d.Index]) {
				t.Fatalf("device %+v does not add up: live slots %d, all slots %d", d, live[d.Index], used[d.Index])
			}
			if r.Layout.Name == NameHAMiCore && (d.SMLimit < 1 || d.SMLimit > 100) {
				t.Fatalf("device %+v: SM limit out of 1..100", d)
			}
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("region does not render as JSON: %v", err)
		}
	})
}
