package gpu

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestDevices(t *testing.T) {
	lib := NewMockLibrary(
		MockGPU{UUID: "GPU-a", Name: "NVIDIA A16", MemoryMiB: 16384},
		MockGPU{UUID: "GPU-b", Name: "NVIDIA A100", MemoryMiB: 40960, MIG: []string{"MIG-b1", "MIG-b2"}},
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
	lib := NewMockLibrary()
	lib.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	_, err := (&Discoverer{Lib: lib}).Devices()
	var re ReturnError
	if !errors.As(err, &re) || re.Ret != nvml.ERROR_LIBRARY_NOT_FOUND {
		t.Fatalf("err = %v", err)
	}
}

func TestWatchHealth(t *testing.T) {
	lib := NewMockLibrary(MockGPU{UUID: "GPU-a"}, MockGPU{UUID: "GPU-b"})
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
