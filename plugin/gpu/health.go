package gpu

import (
	"context"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// applicationXIDs are errors caused by the application, not the GPU (the
// same list NVIDIA's device plugin ignores): they must not take a GPU away.
var applicationXIDs = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// DefaultPollInterval is how often HealthWatcher polls GPUs that cannot be
// watched through NVML events.
const DefaultPollInterval = 5 * time.Second

// eventWaitMillis bounds one NVML event wait, so that ctx and polling are
// looked at in between.
const eventWaitMillis = 1000

// HealthWatcher reports GPUs that become unhealthy.
//
// Two sources are used:
//
//   - NVML events: a critical XID (other than the application XIDs) makes a
//     GPU unhealthy, every time it is raised. This is how a real driver is
//     watched.
//   - Polling: a GPU whose events cannot be watched (nvmlEventSetCreate or
//     nvmlDeviceRegisterEvents answers NVML_ERROR_NOT_SUPPORTED; fakegpu's
//     nvmlDeviceRegisterEvents does) is queried every PollInterval with
//     nvmlDeviceGetMemoryInfo, a cheap query that must talk to the GPU; the
//     answer NVML_ERROR_GPU_IS_LOST makes it unhealthy, reported once. Every
//     GPU is polled once when the watch starts, so a GPU lost before the
//     plugin started is reported at once.
type HealthWatcher struct {
	Lib nvml.Interface
	// PollInterval is the polling period; 0 means DefaultPollInterval.
	PollInterval time.Duration
}

// WatchHealth watches uuids with a HealthWatcher at the default interval.
func WatchHealth(ctx context.Context, lib nvml.Interface, uuids []string, unhealthy chan<- string) error {
	return (&HealthWatcher{Lib: lib}).Watch(ctx, uuids, unhealthy)
}

// Watch sends the UUID of each GPU found unhealthy on unhealthy until ctx
// ends. It owns an NVML reference for its lifetime.
func (w *HealthWatcher) Watch(ctx context.Context, uuids []string, unhealthy chan<- string) error {
	lib := w.Lib
	interval := w.PollInterval
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml init: %w", nvmlError(ret))
	}
	defer lib.Shutdown()
	handles := make(map[string]nvml.Device, len(uuids))
	for _, u := range uuids {
		h, ret := lib.DeviceGetHandleByUUID(u)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml device %s: %w", u, nvmlError(ret))
		}
		handles[u] = h
	}

	var polled []string
	set, ret := lib.EventSetCreate()
	switch ret {
	case nvml.SUCCESS:
		defer set.Free()
		for _, u := range uuids {
			ret := handles[u].RegisterEvents(nvml.EventTypeXidCriticalError, set)
			if ret == nvml.ERROR_NOT_SUPPORTED {
				polled = append(polled, u)
				continue
			}
			if ret != nvml.SUCCESS {
				return fmt.Errorf("nvml register events for %s: %w", u, nvmlError(ret))
			}
		}
	case nvml.ERROR_NOT_SUPPORTED:
		set, polled = nil, uuids
	default:
		return fmt.Errorf("nvml event set: %w", nvmlError(ret))
	}

	send := func(u string) bool {
		select {
		case unhealthy <- u:
			return true
		case <-ctx.Done():
			return false
		}
	}
	lost := map[string]bool{}
	poll := func(which []string) bool {
		for _, u := range which {
			if lost[u] {
				continue
			}
			if _, ret := handles[u].GetMemoryInfo(); ret == nvml.ERROR_GPU_IS_LOST {
				lost[u] = true
				if !send(u) {
					return false
				}
			}
		}
		return true
	}

	if !poll(uuids) {
		return nil
	}
	next := time.Now().Add(interval)
	for ctx.Err() == nil {
		if len(polled) > 0 && !time.Now().Before(next) {
			if !poll(polled) {
				return nil
			}
			next = time.Now().Add(interval)
		}
		if set == nil {
			t := time.NewTimer(time.Until(next))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		wait := uint32(eventWaitMillis)
		if len(polled) > 0 {
			if ms := time.Until(next).Milliseconds(); ms < int64(wait) {
				wait = uint32(max(ms, 1))
			}
		}
		ev, ret := set.Wait(wait)
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
		if !send(uuid) {
			return nil
		}
	}
	return nil
}
