package deviceplugin_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/allocate"
	"github.com/limitbed/limitbed/plugin/deviceplugin"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/gpu/fakenvml"
)

// TestListAndWatchFakegpu runs the plugin against fakegpu's real
// libnvidia-ml.so.1 through the fake kubelet: it registers, and
// ListAndWatch advertises the profile's GPUs by UUID split three ways, the
// MIG instances of a100-mig one to one, and every virtual device of the GPU
// FAKEGPU_LOST_DEVICE names as Unhealthy (fakegpu has no NVML events, so
// this goes through discovery and the polling health watch). Not parallel:
// fakegpu's profile is chosen through the process environment.
func TestListAndWatchFakegpu(t *testing.T) {
	const (
		a16a = "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50"
		a16b = "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f51"
	)
	split := func(uuid string) []string {
		return []string{uuid + "-0", uuid + "-1", uuid + "-2"}
	}
	cases := []struct {
		name      string
		profile   string
		env       []string
		healthy   []string
		unhealthy []string
	}{
		{name: "2x-a16-16q", profile: "2x-a16-16q", healthy: append(split(a16a), split(a16b)...)},
		{name: "a100-mig", profile: "a100-mig", healthy: []string{
			"MIG-5b1c0d2e-1111-5a3b-9c4d-0e1f2a3b4c01",
			"MIG-5b1c0d2e-2222-5a3b-9c4d-0e1f2a3b4c02",
			"MIG-5b1c0d2e-3333-5a3b-9c4d-0e1f2a3b4c03",
		}},
		{name: "2x-a16-16q device 1 lost", profile: "2x-a16-16q", env: []string{"FAKEGPU_LOST_DEVICE=1"},
			healthy: split(a16a), unhealthy: split(a16b)},
		{name: "2x-a16-16q device 0 lost", profile: "2x-a16-16q", env: []string{"FAKEGPU_LOST_DEVICE=0"},
			healthy: split(a16b), unhealthy: split(a16a)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lib, _ := fakenvml.Setup(t, tc.profile, tc.env...)
			e := setup(t, func(o *deviceplugin.Options, _ *allocate.Options) {
				o.Devices, o.HealthLib, o.HealthPollInterval = &gpu.Discoverer{Lib: lib}, lib, 20*time.Millisecond
			})
			watch, err := e.plugin.Watch(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for _, id := range tc.healthy {
				want[id] = pluginapi.Healthy
			}
			for _, id := range tc.unhealthy {
				want[id] = pluginapi.Unhealthy
			}
			var last string
			deadline := time.After(10 * time.Second)
			for {
				select {
				case devs := <-watch:
					got := map[string]string{}
					var ids []string
					for _, d := range devs {
						got[d.ID] = d.Health
						ids = append(ids, d.ID+"="+d.Health)
					}
					if fmt.Sprint(got) == fmt.Sprint(want) {
						return
					}
					slices.Sort(ids)
					last = fmt.Sprint(ids)
				case <-deadline:
					t.Fatalf("ListAndWatch never sent %v; last %s", want, last)
				}
			}
		})
	}
}
