package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/fixtures"
	"github.com/limitbed/limitbed/plugin/ctrexec"
	"github.com/limitbed/limitbed/plugin/launch"
)

// region is a usage region an unmodified HAMi-core wrote under CUDA_DEVICE_MEMORY_LIMIT_0=3000m
// (one live process, pid 5441): the shared fixture.
func hamiRegion(t *testing.T) []byte {
	return fixtures.Read(t, "hami-core-region/live-1024mib.cache.gz")
}

func TestHealthyPodPasses(t *testing.T) {
	w := healthy(hamiRegion(t))
	rep, err := w.doctor().Pod(context.Background(), "team", "train", "")
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	want := []string{"resources", "annotations", "delivery", "preload", "library", "limits-file", "usage-cache", "exec-view", "login-view"}
	if len(rep.Checks) != len(want) {
		t.Fatalf("%d checks, want %d:\n%s", len(rep.Checks), len(want), text.String())
	}
	for i, c := range rep.Checks {
		if c.Name != want[i] {
			t.Errorf("check %d is %q, want %q (the checklist's order)", i, c.Name, want[i])
		}
		if c.Verdict != OK {
			t.Errorf("%s: %s, want ok:\n%s", c.Name, c.Verdict, text.String())
		}
	}
	if rep.Failed() || !rep.OK {
		t.Fatalf("healthy pod failed:\n%s", text.String())
	}
	for _, s := range []string{"limitDelivery file from the global config (configmap limitbed-system/limitbed)", "hami-core layout", "pids 5441", "the login session sees 3000 MiB"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, text.String())
		}
	}
}

// plantedFault is one fault planted in the healthy pod, and what the doctor must say of it.
type plantedFault struct {
	name    string
	plant   func(w *world)
	check   string
	verdict Verdict
	mention string
	overall bool // the report fails
}

// plantedFaults: one per way a pod's limit fails to hold that the checklist names.
var plantedFaults = []plantedFault{
	{"no gpu resource", func(w *world) { w.pod().Spec.Containers[0].Resources.Limits = nil },
		"resources", Fail, "asks for no nvidia.com/gpu", true},
	{"not scheduled by HAMi", func(w *world) { delete(w.pod().Annotations, "hami.io/vgpu-devices-allocated") },
		"annotations", Fail, "did not go through HAMi's scheduler", true},
	{"allocate failed", func(w *world) { w.pod().Annotations["hami.io/bind-phase"] = "failed" },
		"annotations", Fail, "Allocate failed", true},
	{"no preload mount", func(w *world) { delete(w.workload.files, "/etc/ld.so.preload") },
		"preload", Fail, "preload mount is missing", true},
	{"no library mount", func(w *world) { delete(w.workload.files, "/usr/local/vgpu/libvgpu.so") },
		"preload", Fail, "library mount is missing", true},
	{"library from another build", func(w *world) { w.workload.files["/usr/local/vgpu/libvgpu.so"] = []byte("\x7fELF libvgpu.so build B") },
		"library", Fail, "a library from another build", true},
	{"malformed limits file", func(w *world) {
		w.workload.files["/overrideEnv"] = []byte("CUDA_DEVICE_MEMORY_LIMIT_0=3000m\ngarbage line\nCUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/usage.cache\nHAMI_LIMITS_FORMAT=1\n")
	}, "limits-file", Fail, "malformed limits file: line 2", true},
	{"writable limits file", func(w *world) {
		w.workload.files["/proc/self/mountinfo"] = []byte("2 1 8:1 /x /overrideEnv rw,relatime - ext4 /dev/sda1 rw\n")
	}, "limits-file", Fail, "mounted read-write", true},
	{"limits file from no plugin", func(w *world) { delete(w.workload.files, "/overrideEnv") },
		"limits-file", Fail, "does not exist in file mode", true},
	{"file limit differs from the scheduler's", func(w *world) {
		w.workload.files["/overrideEnv"] = []byte(strings.Replace(limitsFile, "3000m", "30000m", 1))
	}, "limits-file", Fail, "the scheduler assigned 3000 MiB", true},
	{"file compute limit differs from the scheduler's", func(w *world) {
		w.workload.files["/overrideEnv"] = []byte(strings.Replace(limitsFile, "SM_LIMIT=30", "SM_LIMIT=100", 1))
		w.workload.env["CUDA_DEVICE_SM_LIMIT"] = "100"
	}, "limits-file", Fail, "the scheduler assigned 30%", true},
	{"environment overrides the file", func(w *world) { w.workload.env["CUDA_DEVICE_MEMORY_LIMIT_0"] = "16000m" },
		"limits-file", Fail, "the environment disagrees", true},
	{"control disabled", func(w *world) { w.workload.env["CUDA_DISABLE_CONTROL"] = "true" },
		"limits-file", Fail, "CUDA_DISABLE_CONTROL", true},
	{"region stamped by an unlimited process", func(w *world) {
		w.pod().Annotations["hami.io/vgpu-devices-allocated"] = "GPU-3c5a,NVIDIA,2000,30:;"
		w.workload.files["/overrideEnv"] = []byte(strings.Replace(limitsFile, "3000m", "2000m", 1))
		w.workload.env["CUDA_DEVICE_MEMORY_LIMIT_0"] = "2000m"
		w.workload.views[gpuinfo+" --json"] = gpuinfoJSON(2000)
		w.loginView = gpuinfoJSON(2000)
	}, "usage-cache", Fail, "first writer wins", true},
	{"exec session unlimited", func(w *world) { w.workload.views[gpuinfo+" --json"] = gpuinfoJSON(16384) },
		"exec-view", Fail, "the exec session sees 16384 MiB", true},
	{"login session unlimited", func(w *world) { w.loginView = gpuinfoJSON(16384) },
		"login-view", Fail, "a login session has no environment", true},
	{"env-mode pod reached by ssh", func(w *world) {
		w.configMap().Data["config.json"] = `{"nodeconfig":[{"name":"gpu-1","limitdelivery":"env"}]}`
		delete(w.workload.files, "/overrideEnv")
		w.loginView = gpuinfoJSON(16384)
	}, "login-view", Fail, "and the pod runs in env mode", true},
	{"env-mode pod escaped through its own spec's variable", func(w *world) {
		w.configMap().Data["config.json"] = `{"nodeconfig":[{"name":"gpu-1","limitdelivery":"env"}]}`
		delete(w.workload.files, "/overrideEnv")
		w.workload.env["CUDA_DEVICE_MEMORY_LIMIT_0"] = "16000m"
	}, "limits-file", Fail, "the scheduler assigned 3000 MiB", true},
	{"env delivery is named with its layer", func(w *world) {
		w.configMap().Data["config.json"] = `{"nodeconfig":[{"name":"gpu-1","limitdelivery":"env"}]}`
		delete(w.workload.files, "/overrideEnv")
		w.loginView = gpuinfoJSON(16384)
	}, "delivery", Warn, "limitDelivery env from the node config", true},
	{"ignored pod annotation", func(w *world) { w.pod().Annotations["hami.io/limit-delivery"] = "env" },
		"delivery", OK, "is ignored: the admin gate is closed", false},
	{"bad delivery annotation", func(w *world) { w.pod().Annotations["hami.io/limit-delivery"] = "envv" },
		"delivery", Fail, "is not one of file|env", true},
	{"MIG pod", func(w *world) {
		w.pod().Annotations["hami.io/vgpu-devices-allocated"] = "MIG-7f1e,NVIDIA,4864,0:;"
		w.workload.files = map[string][]byte{}
	}, "delivery", Warn, "MIG", false},
	{"no login session", func(w *world) { w.loginErr = fmt.Errorf("%w: su missing", ctrexec.ErrUnsupported) },
		"login-view", Warn, "no login session", false},
}

// TestPlantedFaultIsNamed plants one fault at a time in the healthy pod: doctor fails the check
// that owns it and says why.
func TestPlantedFaultIsNamed(t *testing.T) {
	for _, tc := range plantedFaults {
		t.Run(tc.name, func(t *testing.T) {
			w := healthy(hamiRegion(t))
			tc.plant(w)
			rep, err := w.doctor().Pod(context.Background(), "team", "train", "main")
			if err != nil {
				t.Fatal(err)
			}
			var text bytes.Buffer
			_ = rep.WriteText(&text)
			c, ok := rep.Check(tc.check)
			if !ok {
				t.Fatalf("no check %q:\n%s", tc.check, text.String())
			}
			if c.Verdict != tc.verdict || !strings.Contains(c.Detail+" "+c.Cause, tc.mention) {
				t.Fatalf("%s = %s %q (cause %q), want %s naming %q:\n%s", tc.check, c.Verdict, c.Detail, c.Cause, tc.verdict, tc.mention, text.String())
			}
			if c.Verdict == Fail && c.Fix == "" && c.Cause == "" {
				t.Errorf("%s fails without a cause or a fix", tc.check)
			}
			if rep.Failed() != tc.overall {
				t.Fatalf("report failed = %v, want %v:\n%s", rep.Failed(), tc.overall, text.String())
			}
			// The checks before the owner of the fault still pass: the checklist localises it.
			for _, prev := range rep.Checks {
				if prev.Name == tc.check {
					break
				}
				if prev.Verdict == Fail {
					t.Errorf("%s failed before %s:\n%s", prev.Name, tc.check, text.String())
				}
			}
		})
	}
}

func TestMIGPodSkipsLibraryChecks(t *testing.T) {
	w := healthy(hamiRegion(t))
	w.pod().Annotations["hami.io/vgpu-devices-allocated"] = "MIG-7f1e,NVIDIA,4864,0:;"
	w.pod().Annotations["hami.io/bind-phase"] = "allocating" // the plugin does not consume a static MIG entry
	w.workload.files = map[string][]byte{}
	rep, err := w.doctor().Pod(context.Background(), "team", "train", "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed() {
		var b bytes.Buffer
		_ = rep.WriteText(&b)
		t.Fatalf("a healthy MIG pod failed:\n%s", b.String())
	}
	for _, name := range []string{"preload", "library", "limits-file", "usage-cache", "exec-view", "login-view"} {
		if c, _ := rep.Check(name); c.Verdict != OK || !strings.Contains(c.Detail, "MIG") {
			t.Errorf("%s = %+v, want ok (skipped: MIG pod)", name, c)
		}
	}
}

func TestJSONReport(t *testing.T) {
	w := healthy(hamiRegion(t))
	delete(w.workload.files, "/etc/ld.so.preload")
	rep, err := w.doctor().Pod(context.Background(), "team", "train", "")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Target string
		OK     bool
		Checks []Check
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	if got.OK || got.Target != "pod team/train container main" || len(got.Checks) != 9 || got.Checks[3].Verdict != Fail || got.Checks[3].Fix == "" {
		t.Fatalf("JSON report = %+v", got)
	}
}

func TestUnknownTarget(t *testing.T) {
	w := healthy(hamiRegion(t))
	if _, err := w.doctor().Pod(context.Background(), "team", "nope", ""); err == nil || !strings.Contains(err.Error(), "team/nope") {
		t.Fatalf("missing pod: err = %v", err)
	}
	if _, err := w.doctor().Pod(context.Background(), "team", "train", "sidecar"); err == nil || !strings.Contains(err.Error(), `no container "sidecar"`) {
		t.Fatalf("missing container: err = %v", err)
	}
}

// TestGPUToolOutsidePATH: --gpu-tool names a tool the container's PATH lacks (the test bed mounts
// fakegpu's tools at /opt/fakegpu/bin); nvidia-smi's CSV is read as well as gpuinfo's JSON.
func TestGPUToolOutsidePATH(t *testing.T) {
	for _, tc := range []struct{ tool, cmd, out string }{
		{"/opt/fakegpu/bin/gpuinfo", "/opt/fakegpu/bin/gpuinfo --json", gpuinfoJSON(3000)},
		{"/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits", "3000\n"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			w := healthy(hamiRegion(t))
			w.workload.tool = ""
			w.workload.views = map[string]string{tc.cmd: tc.out}
			d := w.doctor()
			d.GPUTool = tc.tool
			d.Login = func(_ context.Context, _ ctrexec.Container, cmd string) (launch.Result, error) {
				if cmd != tc.cmd {
					return launch.Result{}, fmt.Errorf("login ran %q", cmd)
				}
				return launch.Result{Stdout: []byte(tc.out)}, nil
			}
			rep, err := d.Pod(context.Background(), "team", "train", "")
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"exec-view", "login-view"} {
				if c, _ := rep.Check(name); c.Verdict != OK {
					t.Errorf("%s = %+v", name, c)
				}
			}
			d.GPUTool = ""
			rep, _ = d.Pod(context.Background(), "team", "train", "")
			if c, _ := rep.Check("exec-view"); c.Verdict != Warn || !strings.Contains(c.Detail, "neither gpuinfo nor nvidia-smi") {
				t.Errorf("without a tool: exec-view = %+v", c)
			}
		})
	}
}

// TestBothToolsChecked: a container with gpuinfo and nvidia-smi gets both checked; one that shows
// the physical memory fails the view, named, even when the other shows the limit.
func TestBothToolsChecked(t *testing.T) {
	const smi = "/usr/bin/nvidia-smi"
	smiCmd := smi + " --query-gpu=memory.total --format=csv,noheader,nounits"
	for _, tc := range []struct {
		smiOut  string
		verdict Verdict
		detail  string
	}{
		{"3000\n", OK, "3000 MiB (nvidia-smi)"},
		{"16384\n", Fail, "16384 MiB on device 0 (nvidia-smi)"},
	} {
		w := healthy(hamiRegion(t))
		w.workload.tool = gpuinfo + "\n" + smi
		w.workload.views[smiCmd] = tc.smiOut
		rep, err := w.doctor().Pod(context.Background(), "team", "train", "")
		if err != nil {
			t.Fatal(err)
		}
		c, _ := rep.Check("exec-view")
		if c.Verdict != tc.verdict || !strings.Contains(c.Detail, tc.detail) {
			t.Errorf("nvidia-smi printing %q: exec-view = %+v, want %v with %q", tc.smiOut, c, tc.verdict, tc.detail)
		}
		if tc.verdict == OK && !strings.Contains(c.Detail, "(gpuinfo)") {
			t.Errorf("exec-view %q does not say gpuinfo was checked too", c.Detail)
		}
	}
}

// TestConfiguredResourceName: the resource the chart advertises is the one the pod must ask for.
func TestConfiguredResourceName(t *testing.T) {
	w := healthy(hamiRegion(t))
	w.configMap().Data["device-config.yaml"] = "nvidia:\n  resourceCountName: example.com/vgpu\n"
	rep, err := w.doctor().Pod(context.Background(), "team", "train", "")
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := rep.Check("resources"); c.Verdict != Fail || !strings.Contains(c.Detail, "asks for no example.com/vgpu") {
		t.Fatalf("resources = %+v", c)
	}
	w.configMap().Data["device-config.yaml"] = "nvidia:\n  limitDelivry: env\n"
	rep, _ = w.doctor().Pod(context.Background(), "team", "train", "")
	if c, _ := rep.Check("delivery"); c.Verdict != Fail || !strings.Contains(c.Detail, "limitDelivry") {
		t.Fatalf("a typo in the ConfigMap: delivery = %+v", c)
	}
}
