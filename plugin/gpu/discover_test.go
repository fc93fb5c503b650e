package gpu

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/limitbed/limitbed/plugin/gpu/gpumock"
)

func TestDevices(t *testing.T) {
	lib := gpumock.New(
		gpumock.GPU{UUID: "GPU-a", Name: "NVIDIA A16", MemoryMiB: 16384},
		gpumock.GPU{UUID: "GPU-b", Name: "NVIDIA A100", MemoryMiB: 40960, MIG: []string{"MIG-b1", "MIG-b2"}},
	)
	devs, err := (&Discoverer{Lib: lib}).Devices()
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{
		{UUID: "GPU-a", Name: "NVIDIA A16", Index: 0, MemoryMiB: 16384},
		{UUID: "MIG-b1", Name: "NVIDIA A100 MIG", Index: 1, MemoryMiB: 20480, MIG: true, Parent: "GPU-b"},
		{UUID: "MIG-b2", Name: "NVIDIA A100 MIG", Index: 1, MemoryMiB: 20480, MIG: true, Parent: "GPU-b"},
	}
	if len(devs) != len(want) {
		t.Fatalf("devices = %+v", devs)
	}
	for i := range want {
		if devs[i] != want[i] {
			t.Errorf("device %d = %+v, want %+v", i, devs[i], want[i])
		}
	}
	if len(lib.ShutdownCalls()) != 1 {
		t.Errorf("NVML shut down %d times, want 1", len(lib.ShutdownCalls()))
	}
}

func TestDevicesInitFailure(t *testing.T) {
	lib := gpumock.New()
	lib.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	_, err := (&Discoverer{Lib: lib}).Devices()
	var re ReturnError
	if !errors.As(err, &re) || re.Ret != nvml.ERROR_LIBRARY_NOT_FOUND {
		t.Fatalf("err = %v", err)
	}
}

func TestWatchHealth(t *testing.T) {
	lib := gpumock.New(gpumock.GPU{UUID: "GPU-a"}, gpumock.GPU{UUID: "GPU-b"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan string, 4)
	done := make(chan error, 1)
	go func() { done <- WatchHealth(ctx, lib, []string{"GPU-a", "GPU-b"}, out) }()
	_ = lib.Xid("GPU-a", 13) // application error: ignored
	_ = lib.Xid("GPU-b", 79) // fell off the bus
	select {
	case u := <-out:
		if u != "GPU-b" {
			t.Fatalf("unhealthy %s, want GPU-b", u)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no health event")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-out:
		t.Fatalf("unexpected unhealthy %s", u)
	default:
	}
}

// TestHealthPollFallback: GPUs whose events cannot be watched are polled,
// and a GPU that becomes lost while watched is reported once; XIDs of GPUs
// that do support events are still reported.
func TestHealthPollFallback(t *testing.T) {
	cases := []struct {
		name string
		// noEventSet: EventSetCreate is not supported at all; otherwise
		// only GPU-b refuses RegisterEvents.
		noEventSet bool
	}{
		{"event set not supported", true},
		{"events not supported by one GPU", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lib := gpumock.New(gpumock.GPU{UUID: "GPU-a"}, gpumock.GPU{UUID: "GPU-b"})
			var lost atomic.Bool
			var polls atomic.Int64
			b := lib.Device("GPU-b")
			b.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
				polls.Add(1)
				if lost.Load() {
					return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
				}
				return nvml.Memory{Total: 1 << 30}, nvml.SUCCESS
			}
			if tc.noEventSet {
				lib.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
			} else {
				b.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := make(chan string, 8)
			done := make(chan error, 1)
			w := &HealthWatcher{Lib: lib, PollInterval: 10 * time.Millisecond}
			go func() { done <- w.Watch(ctx, []string{"GPU-a", "GPU-b"}, out) }()

			for polls.Load() < 3 { // healthy while polled: nothing reported
				time.Sleep(time.Millisecond)
			}
			if len(out) != 0 {
				t.Fatalf("healthy GPU reported: %s", <-out)
			}
			lost.Store(true)
			if u := recv(t, out); u != "GPU-b" {
				t.Fatalf("unhealthy %s, want GPU-b", u)
			}
			if !tc.noEventSet {
				_ = lib.Xid("GPU-a", 79)
				if u := recv(t, out); u != "GPU-a" {
					t.Fatalf("unhealthy %s, want GPU-a (XID)", u)
				}
			}
			time.Sleep(100 * time.Millisecond) // ten more poll periods
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if len(out) != 0 {
				t.Fatalf("reported again: %s", <-out)
			}
		})
	}
}

func recv(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case u := <-ch:
		return u
	case <-time.After(5 * time.Second):
		t.Fatal("nothing reported")
		return ""
	}
}
