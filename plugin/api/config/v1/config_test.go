package v1

import (
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/limitbed/limitbed/internal/fixtures"
)

// logLines is a logger that keeps every line.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

func (l *logLines) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

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
		{name: "number log level", in: "nvidia:\n  libCudaLogLevel: 3\n", check: func(t *testing.T, c *DeviceConfig) {
			if *c.Nvidia.LibCudaLogLevel != "3" {
				t.Fatalf("libCudaLogLevel = %q", *c.Nvidia.LibCudaLogLevel)
			}
		}},
		{name: "other vendor section ignored", in: "mthreads:\n  resourceCountName: mthreads.com/vgpu\n  anything: [1, {a: b}]\nnvidia:\n  deviceSplitCount: 2\n",
			check: func(t *testing.T, c *DeviceConfig) {
				if *c.Nvidia.DeviceSplitCount != 2 {
					t.Fatalf("deviceSplitCount = %d", *c.Nvidia.DeviceSplitCount)
				}
			}},
		{name: "typo of the section", in: "nvidai: {}\n", wantErr: `nvidai: unknown field; did you mean "nvidia"?`},
		{name: "typo of limitDelivery", in: "nvidia:\n  limitDelivry: env\n", wantErr: `nvidia.limitDelivry: unknown field; did you mean "limitDelivery"?`},
		{name: "typo of allowPodLimitDeliveryOverride", in: "nvidia:\n  allowPodLimitDeliveryOveride: true\n", wantErr: `did you mean "allowPodLimitDeliveryOverride"?`},
		{name: "case of a known field", in: "nvidia:\n  DeviceSplitCount: 4\n", wantErr: `nvidia.DeviceSplitCount: unknown field; did you mean "deviceSplitCount"? (field names are case-sensitive)`},
		{name: "bad log level", in: "nvidia:\n  libCudaLogLevel: 7\n", wantErr: `nvidia.libCudaLogLevel: "7" is not a log level: use 0 (silent)`},
		{name: "fractional log level", in: "nvidia:\n  libCudaLogLevel: 1.5\n", wantErr: `nvidia.libCudaLogLevel: "1.5" is not a log level`},
		{name: "log level of the wrong type", in: "nvidia:\n  libCudaLogLevel: true\n", wantErr: `nvidia.libCudaLogLevel: found bool, want a log level 0..4, as a number or a string`},
		{name: "section of the wrong type", in: "nvidia: 5\n", wantErr: "nvidia: found number, want a mapping of fields"},
		{name: "quoted number", in: "nvidia:\n  deviceMemoryScaling: \"1.5\"\n", wantErr: "nvidia.deviceMemoryScaling: found string, want a number without quotes"},
		{name: "negative split", in: "nvidia:\n  deviceSplitCount: -1\n", wantErr: "nvidia.deviceSplitCount: found number -1, want a whole number, 0 or more"},
		{name: "bool as string", in: "nvidia:\n  disableCoreLimit: \"yes\"\n", wantErr: "nvidia.disableCoreLimit: found string, want true or false"},
		{name: "bad delivery", in: "nvidia:\n  limitDelivery: envv\n", wantErr: `nvidia.limitDelivery: "envv" is not one of file|env`},
		{name: "enforcement", in: "nvidia:\n  enforcement: kill\n", check: func(t *testing.T, c *DeviceConfig) {
			if *c.Nvidia.Enforcement != EnforcementKill {
				t.Errorf("enforcement %q", *c.Nvidia.Enforcement)
			}
		}},
		{name: "bad enforcement", in: "nvidia:\n  enforcement: kil\n", wantErr: `nvidia.enforcement: "kil" is not one of report|kill`},
		{name: "typo of enforcement", in: "nvidia:\n  enforcment: kill\n", wantErr: `nvidia.enforcment: unknown field; did you mean "enforcement"?`},
		{name: "bad policy", in: "nvidia:\n  gpuCorePolicy: always\n", wantErr: `nvidia.gpuCorePolicy: "always"`},
		{name: "zero split", in: "nvidia:\n  deviceSplitCount: 0\n", wantErr: "deviceSplitCount: must be at least 1"},
		{name: "bad version", in: "version: v2\n", wantErr: `version: "v2" is not supported`},
		{name: "wrong type", in: "nvidia:\n  deviceSplitCount: many\n", wantErr: "parse device config: nvidia.deviceSplitCount: found string, want a whole number, 0 or more, without quotes"},
		{name: "not YAML", in: "nvidia: [\n", wantErr: "parse device config"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseDeviceConfig([]byte(tc.in), logr.Discard())
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
		{name: "typo of limitdelivery", in: `{"nodeconfig":[{"name":"n1","limitdeliver":"env"}]}`, wantErr: `nodeconfig[0].limitdeliver: unknown field; did you mean "limitdelivery"?`},
		{name: "number log level", in: `{"nodeconfig":[{"name":"n1","libcudaloglevel":4}]}`},
		{name: "bad log level names node", in: `{"nodeconfig":[{"name":"n1","libcudaloglevel":"9"}]}`, wantErr: `nodeconfig[0] (node "n1"): libcudaloglevel: "9" is not a log level`},
		{name: "wrong type", in: `{"nodeconfig":[{"name":"n1","devicesplitcount":"4"}]}`, wantErr: "nodeconfig.devicesplitcount: found string, want a whole number"},
		{name: "bad delivery names node", in: `{"nodeconfig":[{"name":"n1","limitdelivery":"envv"}]}`, wantErr: `nodeconfig[0] (node "n1"): limitdelivery: "envv" is not one of file|env`},
		{name: "bad enforcement names node", in: `{"nodeconfig":[{"name":"n1","enforcement":"Kill"}]}`, wantErr: `nodeconfig[0] (node "n1"): enforcement: "Kill" is not one of report|kill`},
		{name: "bad mode", in: `{"nodeconfig":[{"name":"n1","operatingmode":"mps2"}]}`, wantErr: `operatingmode: "mps2"`},
		{name: "missing name", in: `{"nodeconfig":[{}]}`, wantErr: "name is required"},
		{name: "trailing data", in: `{} {}`, wantErr: "trailing data"},
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

func TestResolve(t *testing.T) {
	dc, err := ParseDeviceConfig([]byte("nvidia:\n  deviceSplitCount: 4\n  libCudaLogLevel: \"2\"\n  limitDelivery: env\n"), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	pc, err := ParsePluginConfig([]byte(`{"nodeconfig":[
		{"name":"n1","devicesplitcount":8,"limitdelivery":"file"},
		{"name":"n2","operatingmode":"mig","enforcement":"kill"},
		{"name":"n1","libcudaloglevel":"4"}]}`), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	n1 := Resolve(dc, pc, "n1")
	if n1.DeviceSplitCount != 8 || n1.LibCudaLogLevel != "4" || *n1.NodeLimitDelivery != LimitDeliveryFile || *n1.GlobalLimitDelivery != LimitDeliveryEnv {
		t.Fatalf("n1 = %+v", n1)
	}
	n2 := Resolve(dc, pc, "n2")
	if n2.OperatingMode != OperatingModeMIG || n2.DeviceSplitCount != 4 || n2.NodeLimitDelivery != nil || n2.Enforcement != EnforcementKill || n1.Enforcement != EnforcementReport {
		t.Fatalf("n2 = %+v", n2)
	}
	def := Resolve(nil, nil, "x")
	if def.DeviceSplitCount != DefaultDeviceSplitCount || def.OperatingMode != OperatingModeHAMiCore || def.AllowPodLimitDeliveryOverride || def.Enforcement != EnforcementReport {
		t.Fatalf("defaults = %+v", def)
	}
}

func FuzzParseDeviceConfig(f *testing.F) {
	f.Add([]byte("nvidia:\n  limitDelivery: env\n  deviceSplitCount: 3\n"))
	f.Add([]byte(`{"version":"v1"}`))
	f.Add(fixtures.Read(f, "hami/device-config.yaml"))
	f.Add([]byte("nvidia:\n  libCudaLogLevel: 2\n  DeviceSplitCount: 1\nhygon: {memoryFactor: 1}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseDeviceConfig(data, logr.Discard())
		if err != nil {
			return
		}
		if c.Validate() != nil {
			t.Fatal("parsed config does not validate")
		}
		if c.Nvidia != nil && c.Nvidia.LibCudaLogLevel != nil && !c.Nvidia.LibCudaLogLevel.Valid() {
			t.Fatalf("invalid log level accepted: %q", *c.Nvidia.LibCudaLogLevel)
		}
		_ = Resolve(c, nil, "n")
	})
}

func FuzzParsePluginConfig(f *testing.F) {
	f.Add([]byte(`{"nodeconfig":[{"name":"n1","limitdelivery":"env"}]}`))
	f.Add([]byte(hamiConfigJSON))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParsePluginConfig(data, logr.Discard())
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

// TestParseHAMiStockDeviceConfig reads the device-config.yaml HAMi's chart
// renders with its defaults (../shared/fixtures/hami/device-config.yaml): it
// parses as it is, every value this plugin uses is read (libCudaLogLevel is a
// number there), and one warning names everything ignored: the other vendors'
// sections and the nvidia field this plugin has no use for.
func TestParseHAMiStockDeviceConfig(t *testing.T) {
	var log logLines
	c, err := ParseDeviceConfig(fixtures.Read(t, "hami/device-config.yaml"), log.logger())
	if err != nil {
		t.Fatal(err)
	}
	n := c.Nvidia
	if n == nil {
		t.Fatal("no nvidia section")
	}
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"resourceCountName", *n.ResourceCountName, "nvidia.com/gpu"},
		{"resourceMemoryName", *n.ResourceMemoryName, "nvidia.com/gpumem"},
		{"resourceMemoryPercentageName", *n.ResourceMemoryPercentageName, "nvidia.com/gpumem-percentage"},
		{"resourceCoreName", *n.ResourceCoreName, "nvidia.com/gpucores"},
		{"resourcePriorityName", *n.ResourcePriorityName, "nvidia.com/priority"},
		{"overwriteEnv", *n.OverwriteEnv, false},
		{"defaultMemory", *n.DefaultMemory, int64(0)},
		{"defaultCores", *n.DefaultCores, int32(0)},
		{"defaultGPUNum", *n.DefaultGPUNum, int32(1)},
		{"preConfiguredDeviceMemory", *n.PreConfiguredDeviceMemory, int64(0)},
		{"memoryFactor", *n.MemoryFactor, int32(1)},
		{"deviceSplitCount", *n.DeviceSplitCount, uint(10)},
		{"deviceMemoryScaling", *n.DeviceMemoryScaling, 1.0},
		{"deviceCoreScaling", *n.DeviceCoreScaling, 1.0},
		{"enableNumaTopology", *n.EnableNumaTopology, false},
		{"gpuCorePolicy", *n.GPUCorePolicy, "default"},
		{"libCudaLogLevel", *n.LibCudaLogLevel, LogLevel("1")},
		{"runtimeClassName", *n.RuntimeClassName, ""},
		{"limitDelivery (not in HAMi's file)", n.LimitDelivery == nil, true},
	} {
		if f.got != f.want {
			t.Errorf("%s = %#v, want %#v", f.name, f.got, f.want)
		}
	}
	e := Resolve(c, nil, "node")
	if e.DeviceSplitCount != 10 || e.LibCudaLogLevel != "1" || e.ResourceCountName != "nvidia.com/gpu" || e.GlobalLimitDelivery != nil {
		t.Errorf("resolved = %+v", e)
	}
	lines := log.get()
	if len(lines) != 1 {
		t.Fatalf("log lines = %q, want exactly one warning", lines)
	}
	want := `"fields"=["cambricon" "hygon" "nvidia.migProfileAllowlist"]`
	if !strings.Contains(lines[0], want) || !strings.Contains(lines[0], "ignoring device config fields") {
		t.Errorf("warning = %s, want it to name %s", lines[0], want)
	}
}

// hamiConfigJSON is the shape of HAMi's chart config.json (node overrides),
// with the fields HAMi has and this plugin does not use.
const hamiConfigJSON = `{
  "nodeconfig": [
    {"name": "gpu-node-1", "operatingmode": "hami-core", "devicememoryscaling": 1.8, "devicesplitcount": 10,
     "migstrategy": "none", "filterdevices": {"uuid": [], "index": []}, "libcudaloglevel": 2}
  ]
}`

func TestParseHAMiPluginConfig(t *testing.T) {
	var log logLines
	c, err := ParsePluginConfig([]byte(hamiConfigJSON), log.logger())
	if err != nil {
		t.Fatal(err)
	}
	e := Resolve(nil, c, "gpu-node-1")
	if e.DeviceSplitCount != 10 || e.DeviceMemoryScaling != 1.8 || e.LibCudaLogLevel != "2" || e.OperatingMode != OperatingModeHAMiCore {
		t.Errorf("resolved = %+v", e)
	}
	lines := log.get()
	want := `"fields"=["nodeconfig[0].filterdevices" "nodeconfig[0].migstrategy"]`
	if len(lines) != 1 || !strings.Contains(lines[0], want) {
		t.Errorf("log lines = %q, want one warning naming %s", lines, want)
	}
}

// TestNoWarningWithoutIgnoredFields: a file this plugin fully understands logs nothing.
func TestNoWarningWithoutIgnoredFields(t *testing.T) {
	var log logLines
	if _, err := ParseDeviceConfig([]byte("nvidia:\n  limitDelivery: env\n  libCudaLogLevel: 2\n"), log.logger()); err != nil {
		t.Fatal(err)
	}
	if _, err := ParsePluginConfig([]byte(`{"nodeconfig":[{"name":"a","limitdelivery":"file"}]}`), log.logger()); err != nil {
		t.Fatal(err)
	}
	if l := log.get(); len(l) != 0 {
		t.Fatalf("logged %q", l)
	}
}
