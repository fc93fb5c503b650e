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
	interval := w.PollInterval
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	if ret := w.Lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml init: %w", nvmlError(ret))
	}
	defer w.Lib.Shutdown()
	handles, err := deviceHandles(w.Lib, uuids)
	if err != nil {
		return err
	}
	set, polled, err := registerXIDs(w.Lib, handles, uuids)
	if err != nil {
		return err
	}
	if set != nil {
		defer set.Free()
	}
	h := &healthWatch{ctx: ctx, handles: handles, unhealthy: unhealthy, lost: map[string]bool{},
		set: set, polled: polled, interval: interval}
	if !h.poll(uuids) {
		return nil
	}
	return h.loop()
}

// deviceHandles looks every GPU up by UUID.
func deviceHandles(lib nvml.Interface, uuids []string) (map[string]nvml.Device, error) {
	handles := make(map[string]nvml.Device, len(uuids))
	for _, u := range uuids {
		h, ret := lib.DeviceGetHandleByUUID(u)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml device %s: %w", u, nvmlError(ret))
		}
		handles[u] = h
	}
	return handles, nil
}

// registerXIDs returns an event set with every GPU registered for critical XIDs that can be
// (nil when the driver has no event sets), and the GPUs that must be polled instead.
func registerXIDs(lib nvml.Interface, handles map[string]nvml.Device, uuids []string) (nvml.EventSet, []string, error) {
	set, ret := lib.EventSetCreate()
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_SUPPORTED:
		return nil, uuids, nil
	default:
		return nil, nil, fmt.Errorf("nvml event set: %w", nvmlError(ret))
	}
	var polled []string
	for _, u := range uuids {
		ret := handles[u].RegisterEvents(nvml.EventTypeXidCriticalError, set)
		if ret == nvml.ERROR_NOT_SUPPORTED {
			polled = append(polled, u)
			continue
		}
		if ret != nvml.SUCCESS {
			set.Free()
			return nil, nil, fmt.Errorf("nvml register events for %s: %w", u, nvmlError(ret))
		}
	}
	return set, polled, nil
}

// healthWatch is one Watch's state: the events it waits for and the GPUs it polls.
type healthWatch struct {
	ctx       context.Context
	handles   map[string]nvml.Device
	unhealthy chan<- string
	lost      map[string]bool // polled GPUs already reported: a lost GPU is reported once
	set       nvml.EventSet   // nil: every GPU is polled
	polled    []string
	interval  time.Duration
	next      time.Time // the next poll
}

// send reports u; false when ctx ended first.
func (h *healthWatch) send(u string) bool {
	select {
	case h.unhealthy <- u:
		return true
	case <-h.ctx.Done():
		return false
	}
}

// poll reports each GPU of which that NVML finds lost and was not reported yet; false when ctx
// ended.
func (h *healthWatch) poll(which []string) bool {
	for _, u := range which {
		if h.lost[u] {
			continue
		}
		if _, ret := h.handles[u].GetMemoryInfo(); ret == nvml.ERROR_GPU_IS_LOST {
			h.lost[u] = true
			if !h.send(u) {
				return false
			}
		}
	}
	return true
}

// loop polls every interval and, between polls, waits for XID events, until ctx ends.
func (h *healthWatch) loop() error {
	h.next = time.Now().Add(h.interval)
	for h.ctx.Err() == nil {
		if len(h.polled) > 0 && !time.Now().Before(h.next) {
			if !h.poll(h.polled) {
				return nil
			}
			h.next = time.Now().Add(h.interval)
		}
		if h.set == nil {
			t := time.NewTimer(time.Until(h.next))
			select {
			case <-h.ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		if ok, err := h.event(); err != nil || !ok {
			return err
		}
	}
	return nil
}

// event waits for one XID event, at most until the next poll, and reports its GPU unless the XID
// is the application's; false when ctx ended while reporting.
func (h *healthWatch) event() (bool, error) {
	wait := uint32(eventWaitMillis)
	if len(h.polled) > 0 {
		if ms := time.Until(h.next).Milliseconds(); ms < int64(wait) {
			wait = uint32(max(ms, 1))
		}
	}
	ev, ret := h.set.Wait(wait)
	if ret == nvml.ERROR_TIMEOUT {
		return true, nil
	}
	if ret != nvml.SUCCESS {
		return false, fmt.Errorf("nvml wait for events: %w", nvmlError(ret))
	}
	if ev.EventType != nvml.EventTypeXidCriticalError || applicationXIDs[ev.EventData] {
		return true, nil
	}
	uuid, ret := ev.Device.GetUUID()
	if ret != nvml.SUCCESS {
		return true, nil
	}
	return h.send(uuid), nil
}
