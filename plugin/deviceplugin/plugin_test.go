package deviceplugin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/allocate"
	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/delivery"
	"github.com/limitbed/limitbed/plugin/deviceplugin"
	"github.com/limitbed/limitbed/plugin/deviceplugin/fakekubelet"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/gpu/gpumock"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/pods"
)

const node = "n1"

type env struct {
	t      testing.TB
	ctx    context.Context
	kl     *fakekubelet.Kubelet
	kube   *fake.Clientset      // setup's fake clientset (nil with setupKube)
	client kubernetes.Interface // the API server the plugin uses
	lib    *gpumock.Library
	hook   string
	events *recorder
	plugin *fakekubelet.Plugin
	reg    *pluginapi.RegisterRequest
}

type recorder struct {
	mu     sync.Mutex
	events []string
}

// Eventf records "<type> <reason> <namespace>/<name>: <message>".
func (r *recorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	about := "?"
	if p, ok := obj.(*corev1.Pod); ok {
		about = p.Namespace + "/" + p.Name
	}
	r.events = append(r.events, typ+" "+reason+" "+about+": "+fmt.Sprintf(format, args...))
}

// setup starts a fake kubelet and Run()s the plugin against it with two mock
// GPUs split three ways, waits for registration and dials the plugin.
//
// Without a node among objs, node n1 is added with the scheduler's lock on
// the first pod of objs (the scheduler binds one pod at a time per node).
func setup(t *testing.T, mod func(*deviceplugin.Options, *allocate.Options), objs ...runtime.Object) *env {
	t.Helper()
	var hasNode bool
	var first *corev1.Pod
	for _, o := range objs {
		switch v := o.(type) {
		case *corev1.Node:
			hasNode = true
		case *corev1.Pod:
			if first == nil {
				first = v
			}
		}
	}
	if !hasNode {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
		if first != nil {
			n = lockOn(first.Name)
		}
		objs = append(objs, n)
	}
	kube := fake.NewClientset(objs...)
	e := setupKube(t, mod, kube)
	e.kube = kube
	return e
}

// setupKube is setup against any API server client (e.g. harness/fakeapi's).
func setupKube(t testing.TB, mod func(*deviceplugin.Options, *allocate.Options), kube kubernetes.Interface) *env {
	t.Helper()
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(tctx)
	dir := fakekubelet.ShortTempDir(t)
	kl, err := fakekubelet.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kl.Stop)
	e := &env{t: t, ctx: ctx, kl: kl, client: kube, hook: t.TempDir(), events: &recorder{},
		lib: gpumock.New(gpumock.GPU{UUID: "GPU-a", Name: "NVIDIA A16", MemoryMiB: 16384}, gpumock.GPU{UUID: "GPU-b", Name: "NVIDIA A16", MemoryMiB: 16384})}
	aopts := allocate.Options{HookPath: e.hook, LockDir: filepath.Join(e.hook, "vgpulock")}
	opts := deviceplugin.Options{
		ResourceName: "nvidia.com/gpu", PluginDir: dir, SocketName: "vgpu.sock", KubeletSocket: kl.Socket,
		SplitCount: 3, PreferredAllocation: true,
		Devices: &gpu.Discoverer{Lib: e.lib}, HealthLib: e.lib,
		Pods:     &pods.Client{Kube: kube, NodeName: node},
		Recorder: e.events, Logger: klog.FromContext(ctx),
	}
	if mod != nil {
		mod(&opts, &aopts)
	}
	if err := os.MkdirAll(paths.ContainersDir(e.hook), 0o755); err != nil {
		t.Fatal(err)
	}
	opts.Allocator, err = allocate.New(aopts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- deviceplugin.Run(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	e.reconnect()
	return e
}

func (e *env) reconnect() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	reg, err := e.kl.WaitForRegistration(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	p, err := e.kl.Dial(reg.Endpoint)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { p.Close() })
	e.plugin, e.reg = p, reg
}

func (e *env) pod(ns, name string) *corev1.Pod {
	e.t.Helper()
	p, err := e.client.CoreV1().Pods(ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) limits(key string) map[string]string {
	e.t.Helper()
	data, err := os.ReadFile(filepath.Join(paths.ContainersDir(e.hook), key+".limits"))
	if err != nil {
		e.t.Fatal(err)
	}
	return limitsfile.Parse(data).Vars
}

func (e *env) noLimits(key string) {
	e.t.Helper()
	if _, err := os.Stat(filepath.Join(paths.ContainersDir(e.hook), key+".limits")); !os.IsNotExist(err) {
		e.t.Fatalf("limits file for %s exists (%v)", key, err)
	}
}

// mkPod builds a pod the scheduler has bound: one device entry per
// container (init containers first), bind-phase allocating. A container
// without limits of its own asks for what its entry places (count, the
// largest memory and core limit), as the scheduler would have read it.
func mkPod(name string, bindTime int, devs string, ann map[string]string, ctrs ...corev1.Container) *corev1.Pod {
	a := map[string]string{
		annotations.BindPhase:         "allocating",
		annotations.BindTime:          fmt.Sprint(bindTime),
		annotations.VGPUNode:          node,
		annotations.DevicesToAllocate: devs,
	}
	for k, v := range ann {
		a[k] = v
	}
	if len(ctrs) == 0 {
		ctrs = []corev1.Container{{Name: "main"}}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), Annotations: a},
		Spec:       corev1.PodSpec{NodeName: node, Containers: ctrs},
	}
	requestsFromEntries(p)
	return p
}

// requestsFromEntries gives each container of p without limits the request
// its entry of hami.io/vgpu-devices-to-allocate places.
func requestsFromEntries(p *corev1.Pod) {
	entries, err := annotations.DecodePodDevices(p.Annotations[annotations.DevicesToAllocate])
	if err != nil {
		return
	}
	for i, entry := range entries {
		c, err := pods.ContainerAt(p, i)
		if err != nil || len(entry) == 0 || c.Resources.Limits != nil {
			continue
		}
		l := corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(int64(len(entry)), resource.DecimalSI)}
		var mem, cores int32
		for _, d := range entry {
			mem, cores = max(mem, d.UsedMem), max(cores, d.UsedCores)
		}
		if mem > 0 {
			l["nvidia.com/gpumem"] = *resource.NewQuantity(int64(mem), resource.DecimalSI)
		}
		if cores > 0 {
			l["nvidia.com/gpucores"] = *resource.NewQuantity(int64(cores), resource.DecimalSI)
		}
		c.Resources.Limits = l
	}
}

func mountPaths(r *pluginapi.ContainerAllocateResponse) []string {
	var out []string
	for _, m := range r.Mounts {
		out = append(out, m.ContainerPath)
	}
	return out
}

func TestRegistrationAndListAndWatch(t *testing.T) {
	e := setup(t, nil)
	if e.reg.ResourceName != "nvidia.com/gpu" || e.reg.Endpoint != "vgpu.sock" || e.reg.Version != pluginapi.Version ||
		!e.reg.Options.GetPreferredAllocationAvailable {
		t.Fatalf("registration = %+v", e.reg)
	}
	watch, err := e.plugin.Watch(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	devs := <-watch
	var ids []string
	for _, d := range devs {
		if d.Health != pluginapi.Healthy {
			t.Errorf("device %s is %s", d.ID, d.Health)
		}
		ids = append(ids, d.ID)
	}
	want := []string{"GPU-a-0", "GPU-a-1", "GPU-a-2", "GPU-b-0", "GPU-b-1", "GPU-b-2"}
	if !slices.Equal(ids, want) {
		t.Fatalf("devices = %v, want %v", ids, want)
	}

	// A critical XID on GPU-b marks its three replicas unhealthy.
	if err := e.lib.Xid("GPU-b", 79); err != nil {
		t.Fatal(err)
	}
	select {
	case devs = <-watch:
	case <-time.After(10 * time.Second):
		t.Fatal("no update after XID")
	}
	for _, d := range devs {
		wantHealth := pluginapi.Healthy
		if strings.HasPrefix(d.ID, "GPU-b") {
			wantHealth = pluginapi.Unhealthy
		}
		if d.Health != wantHealth {
			t.Errorf("device %s is %s, want %s", d.ID, d.Health, wantHealth)
		}
	}
}

func TestGetPreferredAllocation(t *testing.T) {
	e := setup(t, nil)
	resp, err := e.plugin.GetPreferredAllocation(e.ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: []string{"GPU-a-0", "GPU-a-1", "GPU-b-0", "GPU-b-1"},
			AllocationSize:     2,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].DeviceIDs; !slices.Equal(got, []string{"GPU-a-0", "GPU-b-0"}) {
		t.Fatalf("preferred = %v, want one replica of each GPU", got)
	}
}

func TestAllocateFileMode(t *testing.T) {
	e := setup(t, nil, mkPod("p", 1, "GPU-a,NVIDIA,3000,50:;", nil))
	r, err := e.plugin.AllocateOne(e.ctx, "GPU-a-1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "3000m" || r.Envs["CUDA_DEVICE_SM_LIMIT"] != "50" ||
		r.Envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] != "/usr/local/vgpu/usage.cache" || r.Envs["NVIDIA_VISIBLE_DEVICES"] != "GPU-a" {
		t.Fatalf("envs = %v", r.Envs)
	}
	for _, m := range []string{"/usr/local/vgpu/libvgpu.so", "/etc/ld.so.preload", "/usr/local/vgpu", "/overrideEnv"} {
		if !slices.Contains(mountPaths(r), m) {
			t.Errorf("mount %s missing from %v", m, mountPaths(r))
		}
	}
	vars := e.limits("uid-p_main")
	if vars["CUDA_DEVICE_MEMORY_LIMIT_0"] != "3000m" || vars["HAMI_LIMITS_FORMAT"] != "1" {
		t.Fatalf("file = %v", vars)
	}
	p := e.pod("default", "p")
	if p.Annotations[annotations.BindPhase] != "success" || p.Annotations[annotations.DevicesToAllocate] != ";" {
		t.Fatalf("annotations after allocation = %v", p.Annotations)
	}
}

func TestAllocateDeliveryModes(t *testing.T) {
	envAnn := map[string]string{annotations.LimitDelivery: "env"}
	cases := []struct {
		name      string
		allow     bool
		node      *v1.LimitDelivery
		ann       map[string]string
		wantFile  bool
		wantEvent bool
	}{
		{name: "default is file", wantFile: true},
		{name: "node config env", node: ptr(v1.LimitDeliveryEnv), wantFile: false},
		{name: "pod env allowed", allow: true, ann: envAnn, wantFile: false},
		{name: "pod env without permission is ignored", ann: envAnn, wantFile: true, wantEvent: true},
		{name: "pod file beats node env", node: ptr(v1.LimitDeliveryEnv), ann: map[string]string{annotations.LimitDelivery: "file"}, wantFile: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, func(o *deviceplugin.Options, _ *allocate.Options) {
				o.Delivery = delivery.Layers{Node: tc.node, AllowPodOverride: tc.allow}
			}, mkPod("p", 1, "GPU-a,NVIDIA,1000,10:;", tc.ann))
			r, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0")
			if err != nil {
				t.Fatal(err)
			}
			if r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
				t.Errorf("env delivery missing: %v", r.Envs)
			}
			hasMount := slices.Contains(mountPaths(r), "/overrideEnv")
			if hasMount != tc.wantFile {
				t.Errorf("/overrideEnv mounted = %v, want %v", hasMount, tc.wantFile)
			}
			if tc.wantFile {
				e.limits("uid-p_main")
			} else {
				e.noLimits("uid-p_main")
			}
			e.events.mu.Lock()
			gotEvent := len(e.events.events) == 1 && strings.Contains(e.events.events[0], "Warning "+delivery.ReasonOverrideIgnored)
			e.events.mu.Unlock()
			if gotEvent != tc.wantEvent {
				t.Errorf("events = %v, want ignored-override event: %v", e.events.events, tc.wantEvent)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestAllocateDisableControl(t *testing.T) {
	ctr := corev1.Container{Name: "main", Env: []corev1.EnvVar{{Name: "CUDA_DISABLE_CONTROL", Value: "true"}}}
	e := setup(t, nil, mkPod("p", 1, "GPU-a,NVIDIA,1000,10:;", nil, ctr))
	r, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0")
	if err != nil {
		t.Fatal(err)
	}
	mounts := mountPaths(r)
	if slices.Contains(mounts, "/etc/ld.so.preload") || !slices.Contains(mounts, "/usr/local/vgpu/libvgpu.so") || !slices.Contains(mounts, "/overrideEnv") {
		t.Fatalf("mounts = %v", mounts)
	}
	if r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
		t.Fatalf("envs = %v", r.Envs)
	}
}

// TestMultiContainerMultiDevice: an init container without GPU, a container
// with two GPUs and one with one. Kubelet allocates per container; the pod
// turns success only after the last one.
func TestMultiContainerMultiDevice(t *testing.T) {
	pod := mkPod("p", 1, ";GPU-a,NVIDIA,3000,30:GPU-b,NVIDIA,4000,30:;GPU-a,NVIDIA,1000,0:;", nil,
		corev1.Container{Name: "two"}, corev1.Container{Name: "one", Env: []corev1.EnvVar{{Name: "CUDA_TASK_PRIORITY", Value: "0"}}})
	pod.Spec.InitContainers = []corev1.Container{{Name: "init"}}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Resources.Limits = nil
	}
	requestsFromEntries(pod) // again, now that the init container shifts the entries
	e := setup(t, nil, pod)

	r1, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0", "GPU-b-0")
	if err != nil {
		t.Fatal(err)
	}
	if r1.Envs["CUDA_DEVICE_MEMORY_LIMIT_1"] != "4000m" || r1.Envs["NVIDIA_VISIBLE_DEVICES"] != "GPU-a,GPU-b" {
		t.Fatalf("container two envs = %v", r1.Envs)
	}
	if ph := e.pod("default", "p").Annotations[annotations.BindPhase]; ph != "allocating" {
		t.Fatalf("phase after the first container = %s", ph)
	}
	r2, err := e.plugin.AllocateOne(e.ctx, "GPU-a-1")
	if err != nil {
		t.Fatal(err)
	}
	if r2.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" || r2.Envs["CUDA_DEVICE_SM_LIMIT"] != "0" {
		t.Fatalf("container one envs = %v", r2.Envs)
	}
	if v := e.limits("uid-p_two"); v["CUDA_DEVICE_MEMORY_LIMIT_0"] != "3000m" || v["CUDA_DEVICE_MEMORY_LIMIT_1"] != "4000m" {
		t.Fatalf("file of two = %v", v)
	}
	if v := e.limits("uid-p_one"); v["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" || v["CUDA_TASK_PRIORITY"] != "0" || v["CUDA_DEVICE_MEMORY_LIMIT_1"] != "" {
		t.Fatalf("file of one = %v", v)
	}
	p := e.pod("default", "p")
	if p.Annotations[annotations.BindPhase] != "success" || p.Annotations[annotations.DevicesToAllocate] != ";;;" {
		t.Fatalf("annotations = %v", p.Annotations)
	}
}

func TestAllocateFailures(t *testing.T) {
	cases := []struct {
		name    string
		pod     *corev1.Pod
		ids     []string
		wantErr string
		phase   string // "" = pod untouched
	}{
		{name: "no pod placed", ids: []string{"GPU-a-0"}, wantErr: "no hami.io/mutex.lock"},
		{name: "device count mismatch", pod: mkPod("p", 1, "GPU-a,NVIDIA,1000,10:;", nil), ids: []string{"GPU-a-0", "GPU-b-0"},
			wantErr: "device number not matched", phase: "failed"},
		{name: "invalid annotation", pod: mkPod("p", 1, "GPU-a,NVIDIA,1000,10:;", map[string]string{annotations.LimitDelivery: "envv"}),
			ids: []string{"GPU-a-0"}, wantErr: `pod default/p annotation hami.io/limit-delivery: "envv" is not one of file|env`, phase: "failed"},
		{name: "undecodable devices", pod: mkPod("p", 1, "GPU-a,NVIDIA:;", nil), ids: []string{"GPU-a-0"}, wantErr: "has 2 fields", phase: "failed"},
		{name: "unsafe container name", pod: mkPod("p", 1, "GPU-a,NVIDIA,1,1:;", nil, corev1.Container{Name: ".."}), ids: []string{"GPU-a-0"},
			wantErr: "unsafe container directory name", phase: "failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.pod != nil {
				objs = append(objs, tc.pod)
			}
			e := setup(t, nil, objs...)
			_, err := e.plugin.AllocateOne(e.ctx, tc.ids...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if tc.phase != "" {
				if ph := e.pod("default", "p").Annotations[annotations.BindPhase]; ph != tc.phase {
					t.Fatalf("phase = %q, want %q", ph, tc.phase)
				}
			}
		})
	}
}

// failFS fails one filesystem step of the limits file's atomic publish.
type failFS struct {
	limitsfile.OSFS
	step limitsfile.Step
}

var errInjected = errors.New("injected I/O error")

func (f failFS) CreateTemp(dir, pattern string) (limitsfile.File, error) {
	if f.step == limitsfile.StepCreate {
		return nil, errInjected
	}
	return f.OSFS.CreateTemp(dir, pattern)
}

func (f failFS) Rename(o, n string) error {
	if f.step == limitsfile.StepRename {
		return errInjected
	}
	return f.OSFS.Rename(o, n)
}

func (f failFS) SyncDir(d string) error {
	if f.step == limitsfile.StepDirSync {
		return errInjected
	}
	return f.OSFS.SyncDir(d)
}

// TestAllocateFailsWhenLimitsFileFails: the file cannot be written (a
// failure injected through the limits file's FS seam, so it holds for root
// too), so the allocation fails over gRPC with the step named and the pod is
// marked failed rather than started without the file.
func TestAllocateFailsWhenLimitsFileFails(t *testing.T) {
	for _, step := range []limitsfile.Step{limitsfile.StepCreate, limitsfile.StepRename, limitsfile.StepDirSync} {
		t.Run(string(step), func(t *testing.T) {
			e := setup(t, func(_ *deviceplugin.Options, a *allocate.Options) { a.FS = failFS{step: step} },
				mkPod("p", 1, "GPU-a,NVIDIA,1000,10:;", nil))
			_, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0")
			if err == nil {
				t.Fatal("allocation succeeded without a limits file")
			}
			for _, want := range []string{string(step), errInjected.Error()} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if ph := e.pod("default", "p").Annotations[annotations.BindPhase]; ph != "failed" {
				t.Fatalf("phase = %q", ph)
			}
		})
	}
}

func TestKubeletRestartReregisters(t *testing.T) {
	e := setup(t, nil, mkPod("p", 1, "GPU-a,NVIDIA,1000,10:;", nil))
	if err := e.kl.Restart(); err != nil {
		t.Fatal(err)
	}
	e.reconnect() // fails unless the plugin registers again
	watch, err := e.plugin.Watch(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if devs := <-watch; len(devs) != 6 {
		t.Fatalf("devices after restart = %d", len(devs))
	}
	if _, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0"); err != nil {
		t.Fatalf("allocate after restart: %v", err)
	}
	// And once more: every re-creation of kubelet.sock re-registers.
	if err := e.kl.Restart(); err != nil {
		t.Fatal(err)
	}
	e.reconnect()
}

// TestCompatProfileV210 runs the plugin as HAMi v2.10: env only, a random
// <uuid>.cache, and the limit-delivery annotation neither honoured nor
// rejected.
func TestCompatProfileV210(t *testing.T) {
	e := setup(t, func(_ *deviceplugin.Options, a *allocate.Options) { a.Profile = allocate.ProfileHAMiV210 },
		mkPod("p", 1, "GPU-a,NVIDIA,2000,20:;", map[string]string{annotations.LimitDelivery: "bogus"}))
	r, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0")
	if err != nil {
		t.Fatal(err)
	}
	cache := r.Envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
	if !strings.HasPrefix(cache, "/usr/local/vgpu/") || !strings.HasSuffix(cache, ".cache") || strings.HasSuffix(cache, "/usage.cache") {
		t.Fatalf("cache = %q, want a random <uuid>.cache", cache)
	}
	if slices.Contains(mountPaths(r), "/overrideEnv") {
		t.Fatal("v2.10 profile mounted /overrideEnv")
	}
	e.noLimits("uid-p_main")
}
