package v1

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// Admin input is bounded: a value the plugin could turn into something the
// kubelet refuses (a device list past its message limit), a limit looser than
// the scheduler's, or a name that is not a Kubernetes resource name fails the
// file with an error naming the field and the fix; a key given twice is
// refused instead of the last one silently winning.
func TestDeviceConfigBounds(t *testing.T) {
	cases := []struct {
		name, in, wantErr string
	}{
		{name: "duplicate key", in: "nvidia:\n  deviceSplitCount: 2\n  deviceSplitCount: 3\n", wantErr: `key "deviceSplitCount" already set`},
		{name: "duplicate section", in: "nvidia: {}\nnvidia: {}\n", wantErr: `key "nvidia" already set`},
		{name: "duplicate key in JSON", in: `{"nvidia":{"limitDelivery":"file","limitDelivery":"env"}}`, wantErr: "limitDelivery"},
		{name: "split past the kubelet's message", in: "nvidia:\n  deviceSplitCount: 100000\n", wantErr: "nvidia.deviceSplitCount: 100000 is more than 1024"},
		{name: "memory scaling too large", in: "nvidia:\n  deviceMemoryScaling: 1000\n", wantErr: "nvidia.deviceMemoryScaling: 1000 is not in (0, 100]"},
		{name: "core scaling zero", in: "nvidia:\n  deviceCoreScaling: 0\n", wantErr: "nvidia.deviceCoreScaling: 0 is not in (0, 100]"},
		{name: "default cores over 100", in: "nvidia:\n  defaultCores: 150\n", wantErr: "nvidia.defaultCores: 150 is not in 0..100"},
		{name: "default GPU number over 16", in: "nvidia:\n  defaultGPUNum: 17\n", wantErr: "nvidia.defaultGPUNum: 17 is not in 0..16"},
		{name: "negative default memory", in: "nvidia:\n  defaultMemory: -1\n", wantErr: "nvidia.defaultMemory: -1 is not in 0..2147483647"},
		{name: "default memory past int32", in: "nvidia:\n  defaultMemory: 4294967296\n", wantErr: "nvidia.defaultMemory: 4294967296 is not in 0..2147483647"},
		{name: "memory factor zero", in: "nvidia:\n  memoryFactor: 0\n", wantErr: "nvidia.memoryFactor: 0 is not in 1..1048576"},
		{name: "negative preconfigured memory", in: "nvidia:\n  preConfiguredDeviceMemory: -5\n", wantErr: "nvidia.preConfiguredDeviceMemory: -5 must not be negative"},
		{name: "resource name without domain", in: "nvidia:\n  resourceMemoryName: gpumem\n", wantErr: `nvidia.resourceMemoryName: "gpumem" is not an extended resource name`},
		{name: "resource name with a space", in: "nvidia:\n  resourceCountName: \"nvidia.com/g pu\"\n", wantErr: `nvidia.resourceCountName: "nvidia.com/g pu" is not an extended resource name`},
		{name: "empty resource name", in: "nvidia:\n  resourceCoreName: \"\"\n", wantErr: `nvidia.resourceCoreName: "" is not an extended resource name`},
		{name: "memory and count the same resource", in: "nvidia:\n  resourceMemoryName: nvidia.com/gpu\n", wantErr: "nvidia.resourceMemoryName: nvidia.com/gpu is also nvidia.resourceCountName"},
		{name: "the largest bounds pass", in: "nvidia:\n  deviceSplitCount: 1024\n  deviceMemoryScaling: 100\n  defaultCores: 100\n  defaultGPUNum: 16\n  memoryFactor: 1048576\n  defaultMemory: 2147483647\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDeviceConfig([]byte(tc.in), logr.Discard())
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestPluginConfigBounds(t *testing.T) {
	cases := []struct {
		name, in, wantErr string
	}{
		{name: "duplicate key in an entry", in: `{"nodeconfig":[{"name":"n1","limitdelivery":"file","limitdelivery":"env"}]}`,
			wantErr: `nodeconfig[0]: key "limitdelivery" given twice`},
		{name: "duplicate name key", in: `{"nodeconfig":[{"name":"n1","name":"n2"}]}`, wantErr: `nodeconfig[0]: key "name" given twice`},
		{name: "duplicate top-level key", in: `{"nodeconfig":[],"nodeconfig":[{"name":"n1"}]}`, wantErr: `key "nodeconfig" given twice`},
		{name: "split past the kubelet's message", in: `{"nodeconfig":[{"name":"n1","devicesplitcount":5000}]}`,
			wantErr: `nodeconfig[0] (node "n1"): deviceSplitCount: 5000 is more than 1024`},
		{name: "node name not a node name", in: `{"nodeconfig":[{"name":"n1/../x"}]}`, wantErr: `nodeconfig[0]: name "n1/../x" is not a node name`},
		{name: "negative preconfigured memory", in: `{"nodeconfig":[{"name":"n1","preconfigureddevicememory":-1}]}`, wantErr: "preconfigureddevicememory: -1 must not be negative"},
		{name: "two entries for one node still merge", in: `{"nodeconfig":[{"name":"n1","devicesplitcount":2},{"name":"n1","limitdelivery":"env"}]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePluginConfig([]byte(tc.in), logr.Discard())
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// The scheduler's request settings (HAMi's resource names and defaults) are
// resolved so the plugin can hold a placement to the pod's own requests.
func TestResolveRequestSettings(t *testing.T) {
	def := Resolve(nil, nil, "n")
	want := Requests{
		CountName: "nvidia.com/gpu", MemoryName: "nvidia.com/gpumem", CoreName: "nvidia.com/gpucores",
		MemoryPercentageName: "nvidia.com/gpumem-percentage", DefaultMemory: 0, DefaultCores: 0, MemoryFactor: 1,
	}
	if def.Requests != want {
		t.Fatalf("defaults = %+v, want HAMi's %+v", def.Requests, want)
	}
	dc, err := ParseDeviceConfig([]byte("nvidia:\n  resourceCountName: example.com/vgpu\n  resourceMemoryName: example.com/vmem\n"+
		"  defaultMemory: 2048\n  defaultCores: 20\n  defaultGPUNum: 2\n  memoryFactor: 1024\n"), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	got := Resolve(dc, nil, "n").Requests
	if got.CountName != "example.com/vgpu" || got.MemoryName != "example.com/vmem" || got.CoreName != "nvidia.com/gpucores" ||
		got.DefaultMemory != 2048 || got.DefaultCores != 20 || got.MemoryFactor != 1024 {
		t.Fatalf("resolved = %+v", got)
	}
	if Resolve(dc, nil, "n").ResourceCountName != "example.com/vgpu" {
		t.Fatal("ResourceCountName and Requests.CountName disagree")
	}
}
