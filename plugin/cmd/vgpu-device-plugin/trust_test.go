package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/harness/fakeapi"
	"github.com/limitbed/limitbed/harness/scheduler"
	"github.com/limitbed/limitbed/plugin/annotations"
	"github.com/limitbed/limitbed/plugin/deviceplugin/fakekubelet"
	"github.com/limitbed/limitbed/plugin/gpu/fakenvml"
)

// The trust model's cases against the real main path (run, as the binary
// runs), the harness's API server (harness/fakeapi: HTTP, resourceVersions,
// events) with the scheduler's protocol played by harness/scheduler, the
// fake kubelet and fakegpu's NVML (one A16, 16384 MiB).

const (
	trustNode = "n1"
	gpuUUID   = "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50"
)

type world struct {
	t      *testing.T
	ctx    context.Context
	api    *fakeapi.Server
	kube   kubernetes.Interface
	hook   string
	plugin *fakekubelet.Plugin
}

// startWorld runs the plugin binary's run() against a fresh fake API server
// (or the kubeconfig given) and the fake kubelet, and dials it.
func startWorld(t *testing.T, kubeconfig string, args ...string) *world {
	t.Helper()
	_, nvmlPath := fakenvml.Setup(t, "a16-16q")
	w := &world{t: t, hook: filepath.Join(t.TempDir(), "hook")}
	if kubeconfig == "" {
		s, err := fakeapi.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		if err := s.AddNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: trustNode}}); err != nil {
			t.Fatal(err)
		}
		kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
		if err := s.WriteKubeconfig(kubeconfig); err != nil {
			t.Fatal(err)
		}
		w.api = s
		if w.kube, err = kubernetes.NewForConfig(s.RESTConfig()); err != nil {
			t.Fatal(err)
		}
	}
	kl, dir := startKubelet(t)
	tmp := t.TempDir()
	if err := os.MkdirAll(filepath.Join(w.hook, "vgpu", "containers"), 0o755); err != nil {
		t.Fatal(err)
	}
	all := append([]string{
		"--node-name=" + trustNode, "--kubeconfig=" + kubeconfig,
		"--node-config-file=" + filepath.Join(tmp, "none.json"),
		"--device-plugin-dir=" + dir, "--socket-name=vgpu.sock", "--kubelet-socket=" + kl.Socket,
		"--hook-path=" + w.hook, "--nvml-library=" + nvmlPath, "--health-checks=false",
	}, args...)
	ctx, cancel := context.WithCancel(context.Background())
	w.ctx = ctx
	done := make(chan error, 1)
	go func() { done <- run(ctx, all, noEnv) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	reg, err := kl.WaitForRegistration(wctx)
	if err != nil {
		t.Fatalf("no registration: %v", err)
	}
	if w.plugin, err = kl.Dial(reg.Endpoint); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.plugin.Close() })
	return w
}

// pod creates a pod on the node asking for one GPU with mem MiB.
func (w *world) pod(name string, mem int64, ann map[string]string) *corev1.Pod {
	w.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Annotations: ann},
		Spec: corev1.PodSpec{NodeName: trustNode, Containers: []corev1.Container{{Name: "main", Image: "x",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				"nvidia.com/gpu":    resource.MustParse("1"),
				"nvidia.com/gpumem": *resource.NewQuantity(mem, resource.DecimalSI),
			}}}}},
	}
	if err := w.api.AddPod(p); err != nil {
		w.t.Fatal(err)
	}
	got, _ := w.api.Pod("default", name)
	return got
}

// schedule plays HAMi's scheduler: node lock, placement, bind phase.
func (w *world) schedule(p *corev1.Pod, mem int32) {
	w.t.Helper()
	devs := annotations.PodDevices{{{UUID: gpuUUID, Type: "NVIDIA", UsedMem: mem}}}
	if err := scheduler.Bind(w.ctx, w.kube, p, trustNode, devs, scheduler.Options{NoBinding: true}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) allocate(id string) (*pluginapi.ContainerAllocateResponse, error) {
	ctx, cancel := context.WithTimeout(w.ctx, 60*time.Second)
	defer cancel()
	return w.plugin.AllocateOne(ctx, id)
}

func (w *world) phase(name string) string {
	p, _ := w.api.Pod("default", name)
	return p.Annotations[annotations.BindPhase]
}

// event waits for a Warning event on pod name with reason whose message
// contains want (the recorder sends events asynchronously).
func (w *world) event(name, reason, want string) {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, ev := range w.api.Events() {
			if ev.InvolvedObject.Name == name && ev.Reason == reason && ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, want) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	var got []string
	for _, ev := range w.api.Events() {
		got = append(got, fmt.Sprintf("%s %s %s: %s", ev.InvolvedObject.Name, ev.Type, ev.Reason, ev.Message))
	}
	w.t.Fatalf("no %s event on %s saying %q; events: %q", reason, name, want, got)
}

func (w *world) limitsFile(p *corev1.Pod) string {
	data, _ := os.ReadFile(filepath.Join(w.hook, "vgpu", "containers", string(p.UID)+"_main.limits"))
	return string(data)
}

// The pod's owner rewrites the scheduler's placement to 0 MiB after the
// bind: the real binary refuses it with an event, instead of "0m".
func TestRunRefusesTheOwnersOwnLimit(t *testing.T) {
	w := startWorld(t, "")
	p := w.pod("owner", 1000, nil)
	w.schedule(p, 1000)
	own := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, annotations.DevicesToAllocate, "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50,NVIDIA,0,0:;")
	if _, err := w.kube.CoreV1().Pods("default").Patch(w.ctx, "owner", types.MergePatchType, []byte(own), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := w.allocate(gpuUUID + "-0")
	if err == nil {
		t.Fatalf("allocated with the owner's placement: %v", r.Envs)
	}
	w.event("owner", "PlacementRefused", "the placement gives 0 MiB (no limit at all), but the container requests nvidia.com/gpumem: 1000")
	if ph := w.phase("owner"); ph != "failed" {
		t.Errorf("phase = %q", ph)
	}
	if f := w.limitsFile(p); f != "" {
		t.Errorf("a limits file was written: %q", f)
	}
}

// A pod that skipped the scheduler, admitted while the victim holds the node
// lock, gets nothing; the victim is then allocated normally.
func TestRunRefusesAPodThatSkippedTheScheduler(t *testing.T) {
	w := startWorld(t, "")
	victim := w.pod("victim", 1000, nil)
	w.schedule(victim, 1000)
	rogue := w.pod("rogue", 8000, nil)
	if r, err := w.allocate(gpuUUID + "-1"); err == nil {
		t.Fatalf("the rogue's call got %v", r.Envs)
	}
	w.event("rogue", "PlacementRefused", "no placement by the scheduler")
	if w.limitsFile(rogue) != "" || w.limitsFile(victim) != "" {
		t.Fatal("a limits file was written for the rogue's call")
	}
	r, err := w.allocate(gpuUUID + "-0")
	if err != nil {
		t.Fatalf("the victim's call: %v", err)
	}
	if r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" || !strings.Contains(w.limitsFile(victim), "CUDA_DEVICE_MEMORY_LIMIT_0=1000m") {
		t.Fatalf("victim: envs %v, file %q", r.Envs, w.limitsFile(victim))
	}
	if w.phase("victim") != "success" || w.phase("rogue") != "failed" {
		t.Fatalf("phases: victim %q, rogue %q", w.phase("victim"), w.phase("rogue"))
	}
}

// A trap pod with its own placement (old bind time, the victim's GPU, 0 MiB)
// gets nothing; the victim is allocated normally into its own directory.
func TestRunRefusesATrapPod(t *testing.T) {
	w := startWorld(t, "")
	trap := w.pod("trap", 1, map[string]string{
		annotations.BindPhase: "allocating", annotations.BindTime: "1", annotations.VGPUNode: trustNode,
		annotations.DevicesToAllocate: gpuUUID + ",NVIDIA,0,0:;",
	})
	victim := w.pod("victim", 1000, nil)
	w.schedule(victim, 1000)
	if r, err := w.allocate(gpuUUID + "-0"); err == nil {
		t.Fatalf("the trap's call got %v", r.Envs)
	}
	w.event("trap", "PlacementRefused", "placement not named by the node lock")
	r, err := w.allocate(gpuUUID + "-0")
	if err != nil {
		t.Fatalf("the victim's call: %v", err)
	}
	for _, m := range r.Mounts {
		if m.ContainerPath == "/usr/local/vgpu" && filepath.Base(m.HostPath) != string(victim.UID)+"_main" {
			t.Fatalf("the victim's cache directory is %s", m.HostPath)
		}
	}
	if w.limitsFile(trap) != "" {
		t.Fatal("the trap got a limits file")
	}
}

// A full GPU on a node in MIG mode: the device would come from the placement
// (here "all"); it is refused.
func TestRunMIGModeRefusesAFullGPU(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(`{"nodeconfig":[{"name":"n1","operatingmode":"mig"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	w := startWorld(t, "", "--node-config-file="+cfg)
	p := w.pod("p", 1000, nil)
	if err := scheduler.Bind(w.ctx, w.kube, p, trustNode, annotations.PodDevices{{{UUID: "all", Type: "NVIDIA", UsedMem: 1000}}}, scheduler.Options{NoBinding: true}); err != nil {
		t.Fatal(err)
	}
	r, err := w.allocate(gpuUUID + "-0")
	if err == nil {
		t.Fatalf("MIG mode handed out a full GPU: %v", r.Envs)
	}
	if !strings.Contains(err.Error(), "not a MIG device") {
		t.Fatalf("err = %v", err)
	}
}

// An API server that accepts connections and never answers: every Allocate
// returns within --api-timeout.
func TestRunBoundedUnderASilentAPIServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"http://%s\"}}]\n"+
		"users: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n", ln.Addr())
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	w := startWorld(t, kubeconfig, "--api-timeout=300ms")
	for range 3 {
		start := time.Now()
		if _, err := w.allocate(gpuUUID + "-0"); err == nil {
			t.Fatal("allocated without an API server")
		}
		if d := time.Since(start); d > 10*time.Second { // generous for a loaded machine; the benchmark has the figure
			t.Fatalf("an Allocate took %v under --api-timeout=300ms", d)
		}
	}
}

// The kubelet asks again for a container whose placement was claimed (it restarted before the
// answer reached it): the real binary, against the harness's API server, gives the same answer
// and claims nothing more. Before: refused, no pod being bound.
func TestRunRetryAfterTheClaimGetsTheSameAnswer(t *testing.T) {
	w := startWorld(t, "")
	p := w.pod("retried", 1000, nil)
	w.schedule(p, 1000)
	first, err := w.allocate(gpuUUID + "-0")
	if err != nil {
		t.Fatal(err)
	}
	claimed, _ := w.api.Pod("default", "retried")
	again, err := w.allocate(gpuUUID + "-0")
	if err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if !proto.Equal(first, again) {
		t.Errorf("the retry got another answer:\n%v\nfirst:\n%v", again, first)
	}
	if now, _ := w.api.Pod("default", "retried"); now.ResourceVersion != claimed.ResourceVersion || w.phase("retried") != "success" {
		t.Errorf("the retry changed the pod: %v", now.Annotations)
	}
}
