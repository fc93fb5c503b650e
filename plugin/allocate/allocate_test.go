package allocate

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/libvars"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/paths"
)

func newAllocator(t testing.TB, mod func(*Options)) (*Allocator, string) {
	t.Helper()
	hook := t.TempDir()
	opts := Options{HookPath: hook, LockDir: filepath.Join(hook, "vgpulock")}
	if mod != nil {
		mod(&opts)
	}
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(paths.ContainersDir(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	return a, hook
}

func mkReq(uid, ctr string, env []corev1.EnvVar, devs ...annotations.ContainerDevice) Request {
	c := &corev1.Container{Name: ctr, Env: env}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p-" + uid, UID: types.UID(uid)}}
	ids := make([]string, len(devs))
	for i, d := range devs {
		ids[i] = d.UUID + "-0"
	}
	return Request{Pod: pod, Container: c, Devices: devs, DeviceIDs: ids, Delivery: v1.LimitDeliveryFile}
}

var (
	devA = annotations.ContainerDevice{UUID: "GPU-a", Type: "NVIDIA", UsedMem: 3000, UsedCores: 50}
	devB = annotations.ContainerDevice{UUID: "GPU-b", Type: "NVIDIA", UsedMem: 5000, UsedCores: 20}
)

func mountsByPath(r *pluginapi.ContainerAllocateResponse) map[string]*pluginapi.Mount {
	m := map[string]*pluginapi.Mount{}
	for _, mt := range r.Mounts {
		m[mt.ContainerPath] = mt
	}
	return m
}

func readLimits(t *testing.T, hook, key string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(paths.ContainersDir(hook), key+".limits"))
	if err != nil {
		t.Fatal(err)
	}
	p := limitsfile.Parse(data)
	if len(p.Bad) != 0 {
		t.Fatalf("written file has bad lines %+v", p.Bad)
	}
	return p.Vars
}

func TestAllocateFileMode(t *testing.T) {
	a, hook := newAllocator(t, func(o *Options) { o.LibCudaLogLevel = "1" })
	resp, err := a.Allocate(mkReq("uid1", "main", nil, devA))
	if err != nil {
		t.Fatal(err)
	}
	wantEnv := map[string]string{
		"CUDA_DEVICE_MEMORY_LIMIT_0":      "3000m",
		"CUDA_DEVICE_SM_LIMIT":            "50",
		"CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/usage.cache",
		"LIBCUDA_LOG_LEVEL":               "1",
		"NVIDIA_VISIBLE_DEVICES":          "GPU-a",
	}
	if !maps.Equal(resp.Envs, wantEnv) {
		t.Fatalf("envs = %v, want %v", resp.Envs, wantEnv)
	}
	dir := paths.ContainersDir(hook)
	type mnt struct {
		HostPath string
		ReadOnly bool
	}
	wantMounts := map[string]mnt{
		"/usr/local/vgpu/libvgpu.so": {HostPath: filepath.Join(hook, "vgpu/libvgpu.so"), ReadOnly: true},
		"/etc/ld.so.preload":         {HostPath: filepath.Join(hook, "vgpu/ld.so.preload"), ReadOnly: true},
		"/usr/local/vgpu":            {HostPath: filepath.Join(dir, "uid1_main")},
		"/overrideEnv":               {HostPath: filepath.Join(dir, "uid1_main.limits"), ReadOnly: true},
	}
	got := mountsByPath(resp)
	if len(got) != len(resp.Mounts) || len(got) != len(wantMounts) {
		t.Fatalf("mounts = %v", resp.Mounts)
	}
	for cp, w := range wantMounts {
		m := got[cp]
		if m == nil || m.HostPath != w.HostPath || m.ReadOnly != w.ReadOnly {
			t.Errorf("mount %s = %v, want %+v", cp, m, w)
		}
	}
	// The file carries what HAMi-core reads, not NVIDIA_VISIBLE_DEVICES.
	want := maps.Clone(wantEnv)
	delete(want, "NVIDIA_VISIBLE_DEVICES")
	want["HAMI_LIMITS_FORMAT"] = "1"
	maps.Copy(want, map[string]string{"CUDA_OVERSUBSCRIBE": "false", "GPU_CORE_UTILIZATION_POLICY": "default",
		"CUDA_TASK_PRIORITY": "1", "LIBVGPU_HOSTPID_BROKER": "0"})
	if vars := readLimits(t, hook, "uid1_main"); !maps.Equal(vars, want) {
		t.Fatalf("file vars = %v, want %v", vars, want)
	}
	st, err := os.Stat(filepath.Join(dir, "uid1_main"))
	if err != nil || !st.IsDir() || st.Mode().Perm() != 0o777 {
		t.Fatalf("cache dir: %v %v", st, err)
	}
	// The file is beside the directory, never inside the read-write mount.
	if _, err := os.Stat(filepath.Join(dir, "uid1_main", "uid1_main.limits")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("limits file found inside the cache dir")
	}
}

func TestAllocateVariants(t *testing.T) {
	priority := []corev1.EnvVar{{Name: "CUDA_TASK_PRIORITY", Value: "0"}, {Name: "GPU_CORE_UTILIZATION_POLICY", Value: "force"}}
	cases := []struct {
		name       string
		opts       func(*Options)
		req        Request
		wantEnv    map[string]string // subset
		noEnv      []string
		mounts     []string // container paths that must be present
		noMounts   []string
		fileVars   map[string]string // subset; nil = no file expected
		wantNoFile bool
	}{
		{
			name:     "two devices",
			req:      mkReq("u2", "c", nil, devA, devB),
			wantEnv:  map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "3000m", "CUDA_DEVICE_MEMORY_LIMIT_1": "5000m", "CUDA_DEVICE_SM_LIMIT": "50", "NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"},
			fileVars: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_1": "5000m"},
		},
		{
			name:       "env mode writes no file",
			req:        func() Request { r := mkReq("u3", "c", nil, devA); r.Delivery = v1.LimitDeliveryEnv; return r }(),
			wantEnv:    map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "3000m"},
			mounts:     []string{"/etc/ld.so.preload", "/usr/local/vgpu/libvgpu.so"},
			noMounts:   []string{"/overrideEnv"},
			wantNoFile: true,
		},
		{
			// The device is the kubelet's (the device table's UUIDs), never
			// the placement's GPU-a.
			name: "MIG mode",
			opts: func(o *Options) { o.OperatingMode = v1.OperatingModeMIG },
			req: func() Request {
				r := mkReq("u4", "c", nil, devA)
				r.DeviceIDs, r.UUIDs = []string{"MIG-7"}, []string{"MIG-7"}
				return r
			}(),
			wantEnv:    map[string]string{"NVIDIA_VISIBLE_DEVICES": "MIG-7"},
			noEnv:      []string{"CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_MEMORY_SHARED_CACHE"},
			noMounts:   []string{"/overrideEnv", "/etc/ld.so.preload", "/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu"},
			wantNoFile: true,
		},
		{
			name: "MIG device IDs",
			req: Request{Pod: mkReq("u5", "c", nil).Pod, Container: &corev1.Container{Name: "c"},
				DeviceIDs: []string{"MIG-1234"}, UUIDs: []string{"MIG-1234"}, Delivery: v1.LimitDeliveryFile, MIG: true},
			wantEnv:    map[string]string{"NVIDIA_VISIBLE_DEVICES": "MIG-1234"},
			noEnv:      []string{"CUDA_DEVICE_SM_LIMIT"},
			noMounts:   []string{"/overrideEnv", "/etc/ld.so.preload"},
			wantNoFile: true,
		},
		{
			name:     "CUDA_DISABLE_CONTROL keeps env, lib, cache and file but drops the preload",
			req:      mkReq("u6", "c", []corev1.EnvVar{{Name: "CUDA_DISABLE_CONTROL", Value: "true"}}, devA),
			wantEnv:  map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "3000m"},
			mounts:   []string{"/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu", "/overrideEnv"},
			noMounts: []string{"/etc/ld.so.preload"},
			fileVars: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "3000m"},
		},
		{
			name:   "CUDA_DISABLE_CONTROL=false keeps the preload",
			req:    mkReq("u7", "c", []corev1.EnvVar{{Name: "CUDA_DISABLE_CONTROL", Value: "false"}}, devA),
			mounts: []string{"/etc/ld.so.preload"},
		},
		{
			name:     "webhook variables from the spec go into the file, spec policy wins",
			opts:     func(o *Options) { o.DisableCoreLimit = true },
			req:      mkReq("u8", "c", priority, devA),
			wantEnv:  map[string]string{"GPU_CORE_UTILIZATION_POLICY": "disable"},
			fileVars: map[string]string{"CUDA_TASK_PRIORITY": "0", "GPU_CORE_UTILIZATION_POLICY": "force"},
		},
		{
			name: "all switches",
			opts: func(o *Options) {
				o.Oversubscribe, o.LibCudaLogLevel, o.DisableCoreLimit, o.HostPIDBroker = true, "3", true, true
			},
			req: mkReq("u9", "c", nil, devA),
			fileVars: map[string]string{"CUDA_OVERSUBSCRIBE": "true", "LIBCUDA_LOG_LEVEL": "3",
				"GPU_CORE_UTILIZATION_POLICY": "disable", "LIBVGPU_HOSTPID_BROKER": "1"},
		},
		{
			name: "hami-v2.10 profile: env only, random cache name",
			opts: func(o *Options) {
				o.Profile, o.HostPIDBroker = ProfileHAMiV210, true
				o.NewUUID = func() string { return "2f6c0000-0000-4000-8000-0000000000e1" }
			},
			req:        mkReq("u10", "c", nil, devA),
			wantEnv:    map[string]string{"CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/2f6c0000-0000-4000-8000-0000000000e1.cache"},
			noEnv:      []string{"LIBVGPU_HOSTPID_BROKER"},
			mounts:     []string{"/etc/ld.so.preload", "/usr/local/vgpu", "/tmp/vgpulock"},
			noMounts:   []string{"/overrideEnv"},
			wantNoFile: true,
		},
		{
			name: "fake driver",
			opts: func(o *Options) {
				o.FakeDriver = &FakeDriver{LibDir: "/opt/fakegpu/lib", ProfilePath: "/opt/fakegpu/a16.profile", StateDir: "/srv/fakegpu-state"}
			},
			req:     mkReq("u11", "c", nil, devA),
			wantEnv: map[string]string{"FAKEGPU_PROFILE": "/etc/fakegpu/profile", "FAKEGPU_STATE_DIR": "/run/fakegpu"},
			mounts: []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
				"/etc/fakegpu/profile", "/run/fakegpu", "/overrideEnv"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, hook := newAllocator(t, tc.opts)
			resp, err := a.Allocate(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.wantEnv {
				if resp.Envs[k] != v {
					t.Errorf("env %s = %q, want %q", k, resp.Envs[k], v)
				}
			}
			for _, k := range tc.noEnv {
				if _, ok := resp.Envs[k]; ok {
					t.Errorf("env %s set", k)
				}
			}
			got := mountsByPath(resp)
			for _, cp := range tc.mounts {
				if got[cp] == nil {
					t.Errorf("mount %s missing", cp)
				}
			}
			for _, cp := range tc.noMounts {
				if got[cp] != nil {
					t.Errorf("unexpected mount %s", cp)
				}
			}
			key := string(tc.req.Pod.UID) + "_" + tc.req.Container.Name
			limits := filepath.Join(paths.ContainersDir(hook), key+".limits")
			if tc.wantNoFile {
				if _, err := os.Stat(limits); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("limits file exists: %v", err)
				}
				return
			}
			vars := readLimits(t, hook, key)
			for k, v := range tc.fileVars {
				if vars[k] != v {
					t.Errorf("file %s = %q, want %q", k, vars[k], v)
				}
			}
		})
	}
}

// The file spells out every key the library would otherwise default, so a
// key cannot be left to a process's environment. Its bytes are the shared
// vector the C reader resolves under testdata/limits/hostile.env.
func TestAllocateFileIsCompleteVector(t *testing.T) {
	a, hook := newAllocator(t, nil)
	if _, err := a.Allocate(mkReq("u1", "c", nil, devA)); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(paths.ContainersDir(hook), "u1_c.limits"))
	if err != nil {
		t.Fatal(err)
	}
	const vector = "../../testdata/limits/valid/complete-single-device/limits"
	want, err := os.ReadFile(vector)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("limits file differs from %s\n--- got\n%s--- want\n%s", vector, got, want)
	}
}

func TestEnvModeRemovesStaleFile(t *testing.T) {
	a, hook := newAllocator(t, nil)
	req := mkReq("u1", "c", nil, devA)
	if _, err := a.Allocate(req); err != nil {
		t.Fatal(err)
	}
	req.Delivery = v1.LimitDeliveryEnv
	if _, err := a.Allocate(req); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(paths.ContainersDir(hook), "u1_c.limits")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stale limits file survived env-mode allocation: %v", err)
	}
}

func TestCacheDirRecreated(t *testing.T) {
	a, hook := newAllocator(t, nil)
	req := mkReq("u1", "c", nil, devA)
	if _, err := a.Allocate(req); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(paths.ContainersDir(hook), "u1_c", "usage.cache")
	if err := os.WriteFile(stale, []byte("old region"), 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(req); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("usage.cache of the previous allocation survived")
	}
}

func TestPathSafety(t *testing.T) {
	cases := []struct{ uid, ctr string }{
		{"", "c"}, {"u", ""}, {"..", "c"}, {"u", ".."}, {".", "c"}, {"u/../../etc", "c"}, {"u", "a/b"},
		{"u\x00", "c"}, {"u", "c\x00"}, {"a_b", "c"}, {"u", `a\b`}, {".hidden", "c"}, {strings.Repeat("u", 300), "c"},
		// What reaches a path, a file name and a metric label is what the
		// API server itself accepts: a UID of letters, digits and '-', a
		// container name that is a DNS label.
		{"u", "Main"}, {"u", "c\n"}, {"u v", "c"}, {"u", "c d"}, {"\xff", "c"}, {"u", "\xffc"}, {"u", strings.Repeat("c", 64)},
		{"u", "c.d"}, {"u", "-c"}, {"u=1", "c"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%q/%q", tc.uid, tc.ctr), func(t *testing.T) {
			a, hook := newAllocator(t, nil)
			_, err := a.Allocate(mkReq(tc.uid, tc.ctr, nil, devA))
			if err == nil || !strings.Contains(err.Error(), "unsafe container directory name") {
				t.Fatalf("err = %v, want a path-safety rejection", err)
			}
			// Nothing was created anywhere under the hook path but the
			// containers dir itself.
			entries, _ := os.ReadDir(paths.ContainersDir(hook))
			if len(entries) != 0 {
				t.Fatalf("entries created: %v", entries)
			}
		})
	}
	if k, err := paths.ContainerKey("3b1e0c1c-8e0f-4a8b-9c3d-1f2e3d4c5b6a", "main"); err != nil || k != "3b1e0c1c-8e0f-4a8b-9c3d-1f2e3d4c5b6a_main" {
		t.Fatalf("a real UID was rejected: %q %v", k, err)
	}
}

// failingFS fails one step of the limits file write.
type failingFS struct {
	limitsfile.OSFS
	step limitsfile.Step
}

type failingFile struct {
	limitsfile.File
	step limitsfile.Step
}

var errDisk = errors.New("disk full")

func (f failingFS) CreateTemp(dir, pattern string) (limitsfile.File, error) {
	if f.step == limitsfile.StepCreate {
		return nil, errDisk
	}
	file, err := f.OSFS.CreateTemp(dir, pattern)
	return failingFile{file, f.step}, err
}

func (f failingFS) Rename(o, n string) error {
	if f.step == limitsfile.StepRename {
		return errDisk
	}
	return f.OSFS.Rename(o, n)
}

func (f failingFS) SyncDir(d string) error {
	if f.step == limitsfile.StepDirSync {
		return errDisk
	}
	return f.OSFS.SyncDir(d)
}

func (f failingFile) Write(p []byte) (int, error) {
	if f.step == limitsfile.StepWrite {
		n, _ := f.File.Write(p[:len(p)/2])
		return n, errDisk
	}
	return f.File.Write(p)
}

func (f failingFile) Sync() error {
	if f.step == limitsfile.StepSync {
		return errDisk
	}
	return f.File.Sync()
}

func (f failingFile) Chmod(m fs.FileMode) error {
	if f.step == limitsfile.StepChmod {
		return errDisk
	}
	return f.File.Chmod(m)
}

// TestAllocateFailsWhenFileCannotBeWritten: a limit that could not be
// delivered must not become no limit. Every write step failing fails the
// allocation with an error naming the step and the path; no response, no
// temp file, and no partial file under the final name.
func TestAllocateFailsWhenFileCannotBeWritten(t *testing.T) {
	steps := []limitsfile.Step{limitsfile.StepCreate, limitsfile.StepWrite, limitsfile.StepSync,
		limitsfile.StepChmod, limitsfile.StepRename, limitsfile.StepDirSync}
	for _, step := range steps {
		t.Run(string(step), func(t *testing.T) {
			a, hook := newAllocator(t, func(o *Options) { o.FS = failingFS{step: step} })
			resp, err := a.Allocate(mkReq("uid1", "main", nil, devA))
			if err == nil || resp != nil {
				t.Fatalf("Allocate succeeded (%v) although %s failed", resp, step)
			}
			msg := err.Error()
			for _, want := range []string{"pod default/p-uid1 container main", string(step), paths.ContainersDir(hook), "disk full"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not mention %q", msg, want)
				}
			}
			if !errors.Is(err, errDisk) {
				t.Errorf("error does not wrap the cause")
			}
			entries, _ := os.ReadDir(paths.ContainersDir(hook))
			for _, e := range entries {
				if _, tmp := limitsfile.TempOwner(e.Name()); tmp {
					t.Errorf("temp file left: %s", e.Name())
				}
				if e.Name() == "uid1_main.limits" && step != limitsfile.StepDirSync {
					t.Errorf("final file exists after failure at %s", step)
				}
			}
		})
	}
}

func TestRejectsUnwritableValues(t *testing.T) {
	a, _ := newAllocator(t, nil)
	_, err := a.Allocate(mkReq("u", "c", []corev1.EnvVar{{Name: "CUDA_TASK_PRIORITY", Value: "1\nCUDA_DEVICE_MEMORY_LIMIT_0=0"}}, devA))
	if err == nil || !strings.Contains(err.Error(), "forbidden byte") {
		t.Fatalf("err = %v, want a rejection of the newline", err)
	}
}

// TestConcurrentAllocates runs 100 allocations for different containers at
// once: every file holds exactly its own container's limits.
func TestConcurrentAllocates(t *testing.T) {
	a, hook := newAllocator(t, nil)
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := annotations.ContainerDevice{UUID: fmt.Sprintf("GPU-%d", i), Type: "NVIDIA", UsedMem: int32(1000 + i), UsedCores: int32(i % 100)}
			resp, err := a.Allocate(mkReq(fmt.Sprintf("uid%d", i), fmt.Sprintf("c%d", i), nil, d))
			if err != nil {
				errs <- err
				return
			}
			if resp.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != fmt.Sprintf("%dm", 1000+i) {
				errs <- fmt.Errorf("container %d got env %v", i, resp.Envs)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range n {
		vars := readLimits(t, hook, fmt.Sprintf("uid%d_c%d", i, i))
		if vars["CUDA_DEVICE_MEMORY_LIMIT_0"] != fmt.Sprintf("%dm", 1000+i) || vars["CUDA_DEVICE_SM_LIMIT"] != fmt.Sprint(i%100) {
			t.Errorf("container %d file crossed: %v", i, vars)
		}
	}
	entries, _ := os.ReadDir(paths.ContainersDir(hook))
	if len(entries) != 2*n {
		t.Errorf("%d entries in containers dir, want %d dirs + files", len(entries), 2*n)
	}
}

func TestRandomUUIDShape(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	if u := randomUUID(); !re.MatchString(u) {
		t.Fatalf("randomUUID() = %q", u)
	}
}

func TestParseProfile(t *testing.T) {
	if _, err := ParseProfile("hami-v2.9"); err == nil {
		t.Fatal("unknown profile accepted")
	}
	if p, err := ParseProfile("hami-v2.10"); err != nil || p != ProfileHAMiV210 {
		t.Fatal(p, err)
	}
}

// libvgpu.so reads CUDA_DEVICE_MEMORY_LIMIT_0..15 only: a 17th device would
// run unlimited, so the allocation fails instead; 16 still work.
func TestAllocateTooManyDevices(t *testing.T) {
	for _, n := range []int{16, 17} {
		a, hook := newAllocator(t, nil)
		devs := make([]annotations.ContainerDevice, n)
		for i := range devs {
			devs[i] = annotations.ContainerDevice{UUID: fmt.Sprintf("GPU-%d", i), Type: "NVIDIA", UsedMem: 1000, UsedCores: 10}
		}
		_, err := a.Allocate(mkReq("u1", "c", nil, devs...))
		if n <= libvars.Devices {
			if err != nil {
				t.Fatalf("%d devices: %v", n, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "at most 16") {
			t.Fatalf("%d devices: err = %v, want a refusal naming the limit of 16", n, err)
		}
		if _, err := os.Stat(filepath.Join(paths.ContainersDir(hook), "u1_c.limits")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%d devices: a limits file was written (%v)", n, err)
		}
	}
}

// The device identities come from the device table: a MIG request without
// them, or a placement naming other GPUs than the kubelet allocated, is
// refused rather than delivered.
func TestAllocateDeviceIdentities(t *testing.T) {
	a, err := New(Options{HookPath: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	base := mkReq("u9", "c", nil)
	for _, tc := range []struct {
		name    string
		req     Request
		wantErr string
	}{
		{"MIG without the table's identities", Request{Pod: base.Pod, DeviceIDs: []string{"MIG-1"}, MIG: true}, "without the device table's identities"},
		{"placement on another GPU", func() Request {
			r := mkReq("u9", "c", nil, devA)
			r.DeviceIDs, r.UUIDs = []string{"GPU-b-0"}, []string{"GPU-b"}
			return r
		}(), "the placement names [GPU-a], but the kubelet allocated [GPU-b]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := a.Allocate(tc.req); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
