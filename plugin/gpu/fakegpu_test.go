package gpu

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/limitbed/limitbed/plugin/gpu/fakenvml"
)

const (
	a16UUID0   = "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50"
	a16UUID1   = "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f51"
	a100UUID   = "GPU-a1000000-4040-4a00-8000-00000000a101"
	a100Name   = "NVIDIA A100-SXM4-40GB"
	a16Name    = "NVIDIA A16-16Q"
	a16MiB     = 16384
	migUUID1g1 = "MIG-5b1c0d2e-1111-5a3b-9c4d-0e1f2a3b4c01"
	migUUID1g2 = "MIG-5b1c0d2e-2222-5a3b-9c4d-0e1f2a3b4c02"
	migUUID2g  = "MIG-5b1c0d2e-3333-5a3b-9c4d-0e1f2a3b4c03"
)

// TestDiscoverFakegpu runs discovery against fakegpu's real
// libnvidia-ml.so.1 (not parallel: the profile is chosen by environment).
// The devices, their UUIDs and MIG layout are the profiles' (fakegpu/profiles).
func TestDiscoverFakegpu(t *testing.T) {
	cases := []struct {
		profile string
		env     []string
		want    []Device
	}{
		{"2x-a16-16q", nil, []Device{
			{UUID: a16UUID0, Name: a16Name, Index: 0, MemoryMiB: a16MiB},
			{UUID: a16UUID1, Name: a16Name, Index: 1, MemoryMiB: a16MiB},
		}},
		{"a100-mig", nil, []Device{
			{UUID: migUUID1g1, Name: a100Name + " MIG 1g.5gb", Index: 0, MemoryMiB: 4864, MIG: true, Parent: a100UUID},
			{UUID: migUUID1g2, Name: a100Name + " MIG 1g.5gb", Index: 0, MemoryMiB: 4864, MIG: true, Parent: a100UUID},
			{UUID: migUUID2g, Name: a100Name + " MIG 2g.10gb", Index: 0, MemoryMiB: 9856, MIG: true, Parent: a100UUID},
		}},
		// A lost GPU keeps its identity and does not fail the others.
		{"2x-a16-16q", []string{"FAKEGPU_LOST_DEVICE=1"}, []Device{
			{UUID: a16UUID0, Name: a16Name, Index: 0, MemoryMiB: a16MiB},
			{UUID: a16UUID1, Name: a16Name, Index: 1, Lost: true},
		}},
		{"a100-mig", []string{"FAKEGPU_LOST_DEVICE=0"}, []Device{
			{UUID: a100UUID, Name: a100Name, Index: 0, Lost: true},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.profile+" "+fmtEnv(tc.env), func(t *testing.T) {
			lib, _ := fakenvml.Setup(t, tc.profile, tc.env...)
			devs, err := (&Discoverer{Lib: lib}).Devices()
			if err != nil {
				t.Fatal(err)
			}
			if len(devs) != len(tc.want) {
				t.Fatalf("devices = %+v, want %+v", devs, tc.want)
			}
			for i := range tc.want {
				if devs[i] != tc.want[i] {
					t.Errorf("device %d = %+v, want %+v", i, devs[i], tc.want[i])
				}
			}
		})
	}
}

func fmtEnv(env []string) string {
	if len(env) == 0 {
		return "healthy"
	}
	return env[0]
}

// TestHealthPollsFakegpu: fakegpu's NVML has an event set (nvidia-smi needs
// one) but no device raises events, so the watcher polls between waits that
// time out; the GPU FAKEGPU_LOST_DEVICE names is reported, once, and the
// other never.
func TestHealthPollsFakegpu(t *testing.T) {
	lib, _ := fakenvml.Setup(t, "2x-a16-16q", "FAKEGPU_LOST_DEVICE=1")
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("init: %v", nvml.ErrorString(ret))
	}
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		t.Fatalf("fakegpu EventSetCreate = %v, want SUCCESS", nvml.ErrorString(ret))
	}
	d, _ := lib.DeviceGetHandleByIndex(0)
	if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Fatalf("fakegpu RegisterEvents = %v, want NOT_SUPPORTED (the case this test covers)", nvml.ErrorString(ret))
	}
	set.Free()
	defer lib.Shutdown()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan string, 8)
	done := make(chan error, 1)
	w := &HealthWatcher{Lib: lib, PollInterval: 20 * time.Millisecond}
	go func() { done <- w.Watch(ctx, []string{a16UUID0, a16UUID1}, out) }()
	select {
	case u := <-out:
		if u != a16UUID1 {
			t.Fatalf("unhealthy %s, want %s", u, a16UUID1)
		}
	case err := <-done:
		t.Fatalf("watch ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("lost GPU not reported")
	}
	time.Sleep(200 * time.Millisecond) // ten more polls
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(out) != 0 {
		t.Fatalf("reported again or wrongly: %d more", len(out))
	}
}
