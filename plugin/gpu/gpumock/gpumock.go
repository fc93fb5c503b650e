// Package gpumock is a test double of NVML for the device plugin: go-nvml's mock package wired
// to a list of GPUs, with XID events on demand. It lives apart from plugin/gpu so that no
// production binary links it (plugin/cmd's TestProductionBinariesLinkNoTestDoubles holds that);
// the plugin's tests and the harness's in-process simulated node use it.
package gpumock

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// GPU describes one GPU of a mock NVML.
type GPU struct {
	UUID      string
	Name      string
	MemoryMiB uint64
	// MIG lists MIG device UUIDs; non-empty turns MIG mode on.
	MIG []string
}

// Library is an nvml.Interface backed by go-nvml's mock package, for
// tests of the plugin without a driver. Xid injects a critical XID event
// for a GPU; gpu.WatchHealth receives it.
type Library struct {
	*mock.Interface
	events chan nvml.EventData
	devs   map[string]*mock.Device
	mu     sync.Mutex
}

// New returns a mock NVML with the given GPUs.
func New(gpus ...GPU) *Library {
	m := &Library{events: make(chan nvml.EventData, 16), devs: map[string]*mock.Device{}}
	handles := make([]nvml.Device, len(gpus))
	for i, g := range gpus {
		d := device(g.UUID, g.Name, g.MemoryMiB)
		if len(g.MIG) > 0 {
			migs := make([]nvml.Device, len(g.MIG))
			for j, u := range g.MIG {
				migs[j] = device(u, g.Name+" MIG", g.MemoryMiB/uint64(len(g.MIG)))
			}
			d.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS }
			d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return len(migs), nvml.SUCCESS }
			d.GetMigDeviceHandleByIndexFunc = func(n int) (nvml.Device, nvml.Return) {
				if n < 0 || n >= len(migs) {
					return nil, nvml.ERROR_NOT_FOUND
				}
				return migs[n], nvml.SUCCESS
			}
		}
		handles[i] = d
		m.devs[g.UUID] = d
	}
	m.Interface = &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(handles), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(n int) (nvml.Device, nvml.Return) {
			if n < 0 || n >= len(handles) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return handles[n], nvml.SUCCESS
		},
		DeviceGetHandleByUUIDFunc: func(u string) (nvml.Device, nvml.Return) {
			if d, ok := m.devs[u]; ok {
				return d, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
		EventSetCreateFunc: func() (nvml.EventSet, nvml.Return) {
			return &mock.EventSet{
				WaitFunc: func(timeout uint32) (nvml.EventData, nvml.Return) {
					select {
					case ev := <-m.events:
						return ev, nvml.SUCCESS
					default:
						return nvml.EventData{}, nvml.ERROR_TIMEOUT
					}
				},
				FreeFunc: func() nvml.Return { return nvml.SUCCESS },
			}, nvml.SUCCESS
		},
	}
	return m
}

// Xid queues a critical XID event for the GPU with uuid.
func (m *Library) Xid(uuid string, xid uint64) error {
	d, ok := m.devs[uuid]
	if !ok {
		return fmt.Errorf("mock nvml: no GPU %s", uuid)
	}
	m.events <- nvml.EventData{Device: d, EventType: nvml.EventTypeXidCriticalError, EventData: xid}
	return nil
}

// Device returns the mock device of the GPU with uuid (nil if none), for a test to replace one of
// its functions before the code under test runs.
func (m *Library) Device(uuid string) *mock.Device { return m.devs[uuid] }

func device(uuid, name string, memMiB uint64) *mock.Device {
	return &mock.Device{
		GetUUIDFunc:        func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetNameFunc:        func() (string, nvml.Return) { return name, nvml.SUCCESS },
		GetMemoryInfoFunc:  func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: memMiB << 20}, nvml.SUCCESS },
		GetMigModeFunc:     func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED },
		RegisterEventsFunc: func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS },
		GetIndexFunc:       func() (int, nvml.Return) { return 0, nvml.SUCCESS },
	}
}
