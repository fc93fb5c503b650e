package v1

import (
	"strings"
	"testing"
)

func TestParseDeviceConfig(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		wantErr string // empty: must parse
		check   func(t *testing.T, c *DeviceConfig)
	}{
		{name: "empty", in: ""},
		{name: "hami section", in: `
nvidia:
  resourceCountName: nvidia.com/gpu
  deviceSplitCount: 4
  deviceMemoryScaling: 1.5
  libCudaLogLevel: "1"
  gpuCorePolicy: force
  limitDelivery: env
  allowPodLimitDeliveryOverride: true
`, check: func(t *testing.T, c *DeviceConfig) {
			if *c.Nvidia.DeviceSplitCount != 4 || *c.Nvidia.LimitDelivery != LimitDeliveryEnv || !*c.Nvidia.AllowPodLimitDeliveryOverride {
				t.Fatalf("fields not parsed: %+v", c.Nvidia)
			}
		}},
		{name: "json works too", in: `{"version":"v1","nvidia":{"limitDelivery":"file"}}`},
		{name: "unknown top-level field", in: "nvidai: {}\n", wantErr: `unknown field "nvidai"`},
		{name: "unknown nested field", in: "nvidia:\n  limitDelivry: env\n", wantErr: `unknown field "limitDelivry"`},
		{name: "bad delivery", in: "nvidia:\n  limitDelivery: envv\n", wantErr: `nvidia.limitDelivery: "envv" is not one of file|env`},
		{name: "bad policy", in: "nvidia:\n  gpuCorePolicy: always\n", wantErr: `nvidia.gpuCorePolicy: "always"`},
		{name: "zero split", in: "nvidia:\n  deviceSplitCount: 0\n", wantErr: "deviceSplitCount: must be at least 1"},
		{name: "bad version", in: "version: v2\n", wantErr: `version: "v2" is not supported`},
		{name: "wrong type", in: "nvidia:\n  deviceSplitCount: many\n", wantErr: "parse device config"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseDeviceConfig([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

func TestParsePluginConfig(t *testing.T) {
	cases := []struct {
		name, in, wantErr string
	}{
		{name: "hami example", in: `{"nodeconfig":[{"name":"n1","operatingmode":"hami-core","devicesplitcount":5,"limitdelivery":"env"}]}`},
		{name: "unknown field", in: `{"nodeconfig":[{"name":"n1","limitdeliver":"env"}]}`, wantErr: `unknown field "limitdeliver"`},
		{name: "bad delivery names node", in: `{"nodeconfig":[{"name":"n1","limitdelivery":"envv"}]}`, wantErr: `nodeconfig[0] (node "n1"): limitdelivery: "envv" is not one of file|env`},
		{name: "bad mode", in: `{"nodeconfig":[{"name":"n1","operatingmode":"mps2"}]}`, wantErr: `operatingmode: "mps2"`},
		{name: "missing name", in: `{"nodeconfig":[{}]}`, wantErr: "name is required"},
		{name: "trailing data", in: `{} {}`, wantErr: "trailing data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePluginConfig([]byte(tc.in))
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	dc, err := ParseDeviceConfig([]byte("nvidia:\n  deviceSplitCount: 4\n  libCudaLogLevel: \"2\"\n  limitDelivery: env\n"))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := ParsePluginConfig([]byte(`{"nodeconfig":[
		{"name":"n1","devicesplitcount":8,"limitdelivery":"file"},
		{"name":"n2","operatingmode":"mig"},
		{"name":"n1","libcudaloglevel":"4"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	n1 := Resolve(dc, pc, "n1")
	if n1.DeviceSplitCount != 8 || n1.LibCudaLogLevel != "4" || *n1.NodeLimitDelivery != LimitDeliveryFile || *n1.GlobalLimitDelivery != LimitDeliveryEnv {
		t.Fatalf("n1 = %+v", n1)
	}
	n2 := Resolve(dc, pc, "n2")
	if n2.OperatingMode != OperatingModeMIG || n2.DeviceSplitCount != 4 || n2.NodeLimitDelivery != nil {
		t.Fatalf("n2 = %+v", n2)
	}
	def := Resolve(nil, nil, "x")
	if def.DeviceSplitCount != DefaultDeviceSplitCount || def.OperatingMode != OperatingModeHAMiCore || def.AllowPodLimitDeliveryOverride {
		t.Fatalf("defaults = %+v", def)
	}
}

func FuzzParseDeviceConfig(f *testing.F) {
	f.Add([]byte("nvidia:\n  limitDelivery: env\n  deviceSplitCount: 3\n"))
	f.Add([]byte(`{"version":"v1"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseDeviceConfig(data)
		if err != nil {
			return
		}
		if c.Validate() != nil {
			t.Fatal("parsed config does not validate")
		}
		_ = Resolve(c, nil, "n")
	})
}

func FuzzParsePluginConfig(f *testing.F) {
	f.Add([]byte(`{"nodeconfig":[{"name":"n1","limitdelivery":"env"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParsePluginConfig(data)
		if err != nil {
			return
		}
		for _, e := range c.NodeConfig {
			if e.LimitDelivery != nil && !e.LimitDelivery.Valid() {
				t.Fatalf("invalid delivery accepted: %q", *e.LimitDelivery)
			}
		}
	})
}
