package gpu

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Clocks reads GPUs' SM clocks through NVML. It initialises NVML at its first read, and again
// after a failed one (a scheduler started before the driver is ready catches up); handles are
// looked up by UUID once. Safe for concurrent use.
type Clocks struct {
	Lib nvml.Interface

	mu      sync.Mutex
	init    bool
	handles map[string]nvml.Device
}

// SMClock returns the current SM clock of the GPU uuid (NVML's form, "GPU-…"), in MHz.
func (c *Clocks) SMClock(uuid string) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, err := c.handle(uuid)
	if err != nil {
		return 0, err
	}
	mhz, ret := h.GetClockInfo(nvml.CLOCK_SM)
	if ret != nvml.SUCCESS {
		if ret == nvml.ERROR_GPU_IS_LOST || ret == nvml.ERROR_UNINITIALIZED {
			c.shutdownLocked()
		}
		return 0, fmt.Errorf("nvml SM clock of %s: %w", uuid, nvmlError(ret))
	}
	return mhz, nil
}

// Name returns the GPU's product name as NVML gives it ("NVIDIA H100 80GB HBM3").
func (c *Clocks) Name(uuid string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, err := c.handle(uuid)
	if err != nil {
		return "", err
	}
	name, ret := h.GetName()
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("nvml name of %s: %w", uuid, nvmlError(ret))
	}
	return name, nil
}

// handle initialises NVML if needed and looks the GPU up (c.mu held).
func (c *Clocks) handle(uuid string) (nvml.Device, error) {
	if !c.init {
		if ret := c.Lib.Init(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml init: %w", nvmlError(ret))
		}
		c.init, c.handles = true, map[string]nvml.Device{}
	}
	h, ok := c.handles[uuid]
	if !ok {
		var ret nvml.Return
		if h, ret = c.Lib.DeviceGetHandleByUUID(uuid); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml device %s: %w", uuid, nvmlError(ret))
		}
		c.handles[uuid] = h
	}
	return h, nil
}

// Shutdown releases NVML if a read initialised it.
func (c *Clocks) Shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shutdownLocked()
}

func (c *Clocks) shutdownLocked() {
	if c.init {
		c.Lib.Shutdown()
		c.init, c.handles = false, nil
	}
}
