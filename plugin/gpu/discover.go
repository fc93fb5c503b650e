// Package gpu discovers GPUs and watches their health through NVML. All
// access goes through go-nvml's nvml.Interface, so the real driver, fakegpu's
// libnvidia-ml.so.1 (selected by library path) and the test double in gpumock all work.
package gpu

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Device is one physical GPU or MIG device.
type Device struct {
	UUID      string
	Name      string
	Index     int // NVML index of the GPU (of the parent GPU for MIG)
	MemoryMiB uint64
	// MIG is set for a MIG device; Parent is its GPU's UUID.
	MIG    bool
	Parent string
	// Lost is set for a GPU that NVML reports as lost (NVML_ERROR_GPU_IS_LOST):
	// it keeps its identity (UUID, name) so that it can be advertised as
	// unhealthy, but its memory and MIG devices are unknown.
	Lost bool
}

// NewLibrary returns an NVML binding for the library at path; "" uses the
// default soname libnvidia-ml.so.1 (found by the loader, so a fakegpu
// build on LD_LIBRARY_PATH works too).
func NewLibrary(path string) nvml.Interface {
	if path == "" {
		return nvml.New()
	}
	return nvml.New(nvml.WithLibraryPath(path))
}

// Discoverer lists devices.
type Discoverer struct {
	Lib nvml.Interface
}

// Devices initialises NVML, lists devices and shuts it down again. A GPU
// with MIG mode enabled is represented by its MIG devices. A lost GPU is
// listed with Lost set rather than failing the discovery of the others.
func (d *Discoverer) Devices() (devs []Device, err error) {
	if ret := d.Lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml init: %w", nvmlError(ret))
	}
	defer func() {
		if ret := d.Lib.Shutdown(); ret != nvml.SUCCESS {
			err = errors.Join(err, fmt.Errorf("nvml shutdown: %w", nvmlError(ret)))
		}
	}()
	n, ret := d.Lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml device count: %w", nvmlError(ret))
	}
	for i := 0; i < n; i++ {
		h, ret := d.Lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml device %d handle: %w", i, nvmlError(ret))
		}
		gpu, err := describe(h, i)
		if err != nil {
			return nil, fmt.Errorf("nvml device %d: %w", i, err)
		}
		if gpu.Lost {
			devs = append(devs, gpu)
			continue
		}
		migs, err := migDevices(h, gpu)
		if err != nil {
			return nil, fmt.Errorf("nvml device %d (%s): %w", i, gpu.UUID, err)
		}
		if len(migs) > 0 {
			devs = append(devs, migs...)
			continue
		}
		devs = append(devs, gpu)
	}
	return devs, nil
}

func describe(h nvml.Device, index int) (Device, error) {
	uuid, ret := h.GetUUID()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("uuid: %w", nvmlError(ret))
	}
	name, ret := h.GetName()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("name: %w", nvmlError(ret))
	}
	mem, ret := h.GetMemoryInfo()
	if ret == nvml.ERROR_GPU_IS_LOST {
		return Device{UUID: uuid, Name: name, Index: index, Lost: true}, nil
	}
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("memory info: %w", nvmlError(ret))
	}
	return Device{UUID: uuid, Name: name, Index: index, MemoryMiB: mem.Total >> 20}, nil
}

// migDevices returns the MIG devices of a GPU in MIG mode, or none.
func migDevices(h nvml.Device, parent Device) ([]Device, error) {
	handles, err := migHandles(h)
	if err != nil {
		return nil, err
	}
	var out []Device
	for j, m := range handles {
		d, err := describe(m, parent.Index)
		if err != nil {
			return nil, fmt.Errorf("mig device %d: %w", j, err)
		}
		d.MIG, d.Parent = true, parent.UUID
		out = append(out, d)
	}
	return out, nil
}

// nvmlError turns a Return into an error that keeps the code.
func nvmlError(ret nvml.Return) error { return ReturnError{ret} }

// ReturnError is a failed NVML call.
type ReturnError struct{ Ret nvml.Return }

func (e ReturnError) Error() string {
	return fmt.Sprintf("%s (%d)", nvml.ErrorString(e.Ret), int32(e.Ret))
}
