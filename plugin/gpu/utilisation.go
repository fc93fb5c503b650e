package gpu

import (
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ProcessBusy is one process's share of a GPU's SM time by the driver's samples
// (nvmlDeviceGetProcessUtilization's smUtil, averaged over the samples since the last read), by
// the PID the calling process's namespace sees.
type ProcessBusy struct {
	PID     int
	Share   float64 // 0..1
	Samples int
}

// DeviceBusy is one GPU's processes that the driver sampled busy since the last read (none: no
// process was). A GPU in MIG mode has no per-process samples (NVML_ERROR_NOT_SUPPORTED, as on a
// real GPU): it is not listed.
type DeviceBusy struct {
	UUID      string
	Processes []ProcessBusy // by PID
	Err       error         // the GPU could not be read; the others are still listed
}

// BusySampler reads every GPU's per-process utilisation samples, each time those newer than the
// newest it read before, through an NVML the caller keeps initialised. Not safe for concurrent
// use.
type BusySampler struct {
	Lib  nvml.Interface
	last map[string]uint64 // per GPU: the newest sample's time stamp read
}

// sampleTries bounds the reads of one GPU's samples: the list can grow between go-nvml's call
// for its length and its call for the samples (NVML_ERROR_INSUFFICIENT_SIZE).
const sampleTries = 3

// Busy returns every GPU's busy processes since the last call. It fails only when the GPUs
// cannot be enumerated.
func (s *BusySampler) Busy() ([]DeviceBusy, error) {
	if s.last == nil {
		s.last = map[string]uint64{}
	}
	n, ret := s.Lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml device count: %w", nvmlError(ret))
	}
	var out []DeviceBusy
	for i := 0; i < n; i++ {
		h, ret := s.Lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml device %d handle: %w", i, nvmlError(ret))
		}
		uuid, ret := h.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml device %d uuid: %w", i, nvmlError(ret))
		}
		d, ok := s.device(h, uuid)
		if ok {
			out = append(out, d)
		}
	}
	return out, nil
}

func (s *BusySampler) device(h nvml.Device, uuid string) (DeviceBusy, bool) {
	d := DeviceBusy{UUID: uuid}
	var samples []nvml.ProcessUtilizationSample
	ret := nvml.ERROR_INSUFFICIENT_SIZE
	for try := 0; try < sampleTries && ret == nvml.ERROR_INSUFFICIENT_SIZE; try++ {
		samples, ret = h.GetProcessUtilization(s.last[uuid])
	}
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_FOUND: // no sample newer than the last: nobody was busy
		return d, true
	case nvml.ERROR_NOT_SUPPORTED: // MIG mode, or a GPU without per-process samples
		return d, false
	default:
		d.Err = fmt.Errorf("nvml process utilisation of %s: %w", uuid, nvmlError(ret))
		return d, true
	}
	type sum struct{ util, n int }
	by := map[int]*sum{}
	for _, x := range samples {
		if x.TimeStamp <= s.last[uuid] || x.SmUtil > 100 {
			continue // an old sample, or a figure no share can be
		}
		p := by[int(x.Pid)]
		if p == nil {
			p = &sum{}
			by[int(x.Pid)] = p
		}
		p.util += int(x.SmUtil)
		p.n++
	}
	for _, x := range samples {
		s.last[uuid] = max(s.last[uuid], x.TimeStamp)
	}
	for pid, p := range by {
		d.Processes = append(d.Processes, ProcessBusy{PID: pid, Share: float64(p.util) / float64(p.n) / 100, Samples: p.n})
	}
	sort.Slice(d.Processes, func(i, j int) bool { return d.Processes[i].PID < d.Processes[j].PID })
	return d, true
}
