package gpu

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// applicationXIDs are errors caused by the application, not the GPU (the
// same list NVIDIA's device plugin ignores): they must not take a GPU away.
var applicationXIDs = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// WatchHealth reports the UUID of each GPU that raises a critical XID on
// unhealthy until ctx ends. It owns NVML for its lifetime. A GPU that does
// not support events is not watched.
func WatchHealth(ctx context.Context, lib nvml.Interface, uuids []string, unhealthy chan<- string) error {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml init: %w", nvmlError(ret))
	}
	defer lib.Shutdown()
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvml event set: %w", nvmlError(ret))
	}
	defer set.Free()
	for _, u := range uuids {
		h, ret := lib.DeviceGetHandleByUUID(u)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml device %s: %w", u, nvmlError(ret))
		}
		ret = h.RegisterEvents(nvml.EventTypeXidCriticalError, set)
		if ret == nvml.ERROR_NOT_SUPPORTED {
			continue
		}
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml register events for %s: %w", u, nvmlError(ret))
		}
	}
	for ctx.Err() == nil {
		ev, ret := set.Wait(1000)
		if ret == nvml.ERROR_TIMEOUT {
			continue
		}
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml wait for events: %w", nvmlError(ret))
		}
		if ev.EventType != nvml.EventTypeXidCriticalError || applicationXIDs[ev.EventData] {
			continue
		}
		uuid, ret := ev.Device.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		select {
		case unhealthy <- uuid:
		case <-ctx.Done():
		}
	}
	return nil
}
