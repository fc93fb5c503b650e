package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Process is one process the driver lists on a device
// (nvmlDeviceGetComputeRunningProcesses), by the PID the calling process's
// namespace sees: the driver records host PIDs, so a node agent in the
// host's PID namespace can map and signal them.
type Process struct {
	PID int
	// UsedBytes is what the driver says the process holds on the device:
	// its allocations, its context and the driver's rounding of them.
	UsedBytes uint64
	// Unknown is set when the driver does not report the memory
	// (NVML_VALUE_NOT_AVAILABLE); UsedBytes is then 0.
	Unknown bool
}

// DeviceProcesses is one device's process list: a GPU, or a MIG device of a
// GPU in MIG mode (listed by the MIG device's UUID).
type DeviceProcesses struct {
	UUID      string
	Processes []Process
	// Err is set when this device could not be read (e.g. a lost GPU); the
	// other devices are still listed.
	Err error
}

// valueNotAvailable is NVML_VALUE_NOT_AVAILABLE for 64-bit values.
const valueNotAvailable = ^uint64(0)

// ProcessLister reads every device's process list through an NVML that the
// caller keeps initialised (Init once, Shutdown at the end).
type ProcessLister struct {
	Lib nvml.Interface
}

// Init initialises NVML.
func (p *ProcessLister) Init() error {
	if ret := p.Lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml init: %w", nvmlError(ret))
	}
	return nil
}

// Shutdown releases NVML.
func (p *ProcessLister) Shutdown() {
	_ = p.Lib.Shutdown()
}

// Processes lists every device's processes. It fails only when the devices
// cannot be enumerated; a device that cannot be read carries its error.
func (p *ProcessLister) Processes() ([]DeviceProcesses, error) {
	n, ret := p.Lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml device count: %w", nvmlError(ret))
	}
	var out []DeviceProcesses
	for i := 0; i < n; i++ {
		h, ret := p.Lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml device %d handle: %w", i, nvmlError(ret))
		}
		uuid, ret := h.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml device %d uuid: %w", i, nvmlError(ret))
		}
		migs, err := migHandles(h)
		if err != nil {
			out = append(out, DeviceProcesses{UUID: uuid, Err: err})
			continue
		}
		if len(migs) == 0 {
			out = append(out, listOf(h, uuid))
			continue
		}
		for _, m := range migs {
			mu, ret := m.GetUUID()
			if ret != nvml.SUCCESS {
				out = append(out, DeviceProcesses{UUID: uuid, Err: fmt.Errorf("mig device uuid: %w", nvmlError(ret))})
				continue
			}
			out = append(out, listOf(m, mu))
		}
	}
	return out, nil
}

func listOf(h nvml.Device, uuid string) DeviceProcesses {
	d := DeviceProcesses{UUID: uuid}
	infos, ret := h.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		d.Err = fmt.Errorf("nvml processes of %s: %w", uuid, nvmlError(ret))
		return d
	}
	for _, in := range infos {
		pr := Process{PID: int(in.Pid), UsedBytes: in.UsedGpuMemory}
		if in.UsedGpuMemory == valueNotAvailable {
			pr.UsedBytes, pr.Unknown = 0, true
		}
		d.Processes = append(d.Processes, pr)
	}
	return d
}

// migHandles returns the MIG devices of a GPU in MIG mode, or none.
func migHandles(h nvml.Device) ([]nvml.Device, error) {
	cur, _, ret := h.GetMigMode()
	if ret == nvml.ERROR_NOT_SUPPORTED || (ret == nvml.SUCCESS && cur != nvml.DEVICE_MIG_ENABLE) {
		return nil, nil
	}
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("mig mode: %w", nvmlError(ret))
	}
	max, ret := h.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("max mig devices: %w", nvmlError(ret))
	}
	var out []nvml.Device
	for j := 0; j < max; j++ {
		m, ret := h.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // unpopulated slot
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("mig device %d: %w", j, nvmlError(ret))
		}
		out = append(out, m)
	}
	return out, nil
}
