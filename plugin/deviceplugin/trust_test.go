package deviceplugin_test

import (
	"errors"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/allocate"
	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/deviceplugin"
	"github.com/limitbed/limitbed/plugin/monitor"
	"github.com/limitbed/limitbed/plugin/paths"
)

// The trust model's cases (docs/trust-model.md), each as a hostile tenant
// with pod-create rights would try it.

// lockOn is node n1 with the scheduler's lock on pod default/name.
func lockOn(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Annotations: map[string]string{
		annotations.NodeLock: time.Now().UTC().Format(time.RFC3339) + ",default," + name}}}
}

// gpuCtr is a container asking for one GPU with mem MiB (0: no memory request).
func gpuCtr(name string, mem int64) corev1.Container {
	l := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	if mem > 0 {
		l["nvidia.com/gpumem"] = *resource.NewQuantity(mem, resource.DecimalSI)
	}
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: l}}
}

func (e *env) warnings(about string) []string {
	e.events.mu.Lock()
	defer e.events.mu.Unlock()
	var out []string
	for _, ev := range e.events.events {
		if strings.HasPrefix(ev, "Warning ") && strings.Contains(ev, about) {
			out = append(out, ev)
		}
	}
	return out
}

// A pod's owner writes its own placement: the pod asks for 1000 MiB, the
// placement the plugin is handed says 0 MiB (no limit) or 2147483647 MiB.
// Before: the container got "0m" (unlimited; 8000 MiB granted on fakegpu).
// Now: refused, the pod marked failed with an Event that says why, no file.
func TestAllocateRefusesALimitLooserThanTheRequest(t *testing.T) {
	for _, tc := range []struct {
		mem     int32
		wantErr string
	}{
		{0, "the placement gives 0 MiB (no limit at all), but the container requests nvidia.com/gpumem: 1000"},
		{math.MaxInt32, "the placement gives 2147483647 MiB, but the container requests nvidia.com/gpumem: 1000"},
		{1001, "the placement gives 1001 MiB"},
	} {
		t.Run(strings.Fields(tc.wantErr)[3], func(t *testing.T) {
			p := mkPod("p", 1, "GPU-a,NVIDIA,1000,0:;", nil, gpuCtr("main", 1000))
			p.Annotations[annotations.DevicesToAllocate] = annotations.PodDevices{{{UUID: "GPU-a", Type: "NVIDIA", UsedMem: tc.mem}}}.Encode()
			e := setup(t, nil, lockOn("p"), p)
			_, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			e.noLimits("uid-p_main")
			if ph := e.pod("default", "p").Annotations[annotations.BindPhase]; ph != "failed" {
				t.Errorf("phase = %q, want failed", ph)
			}
			if w := e.warnings("PlacementRefused default/p: "); len(w) != 1 || !strings.Contains(w[0], tc.wantErr) {
				t.Errorf("events = %v, want one warning saying %q", e.events.events, tc.wantErr)
			}
		})
	}
}

// A pod that never went through the scheduler (it names its node itself and
// carries no placement) is admitted while the scheduler holds the node lock
// for the victim. Before: its container received the victim's limits, cache
// directory and limits file, and the victim's own Allocate then failed.
// Now: that call is refused (it may be the rogue's), the rogue gets an Event
// and is marked failed, the victim's placement is untouched, and the
// victim's own Allocate gets the victim's limits.
func TestAllocateRefusesAPodThatSkippedTheScheduler(t *testing.T) {
	victim := mkPod("victim", 2, "GPU-a,NVIDIA,1000,0:;", nil, gpuCtr("main", 1000))
	rogue := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "rogue", UID: "uid-rogue"},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{gpuCtr("main", 8000)}},
	}
	e := setup(t, nil, lockOn("victim"), victim, rogue)

	_, err := e.plugin.AllocateOne(e.ctx, "GPU-a-1") // the kubelet admits the rogue
	if err == nil || !strings.Contains(err.Error(), "default/rogue") {
		t.Fatalf("the rogue's call: err = %v, want a refusal naming pod default/rogue", err)
	}
	e.noLimits("uid-victim_main")
	if _, err := os.Stat(filepath.Join(paths.ContainersDir(e.hook), "uid-victim_main")); !os.IsNotExist(err) {
		t.Fatalf("the victim's cache directory was created for another pod's call (%v)", err)
	}
	v := e.pod("default", "victim")
	if v.Annotations[annotations.BindPhase] != "allocating" || v.Annotations[annotations.DevicesToAllocate] != "GPU-a,NVIDIA,1000,0:;" {
		t.Fatalf("victim after the rogue's call: %v", v.Annotations)
	}
	if ph := e.pod("default", "rogue").Annotations[annotations.BindPhase]; ph != "failed" {
		t.Errorf("rogue phase = %q, want failed", ph)
	}
	if w := e.warnings("PlacementRefused default/rogue: refused: the kubelet may be admitting this pod, which has no placement by the scheduler"); len(w) != 1 {
		t.Errorf("events = %v, want one PlacementRefused warning on the rogue", e.events.events)
	}

	r, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0") // then the victim
	if err != nil {
		t.Fatalf("the victim's own call: %v", err)
	}
	if r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" || e.limits("uid-victim_main")["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
		t.Fatalf("victim envs = %v", r.Envs)
	}
	if ph := e.pod("default", "victim").Annotations[annotations.BindPhase]; ph != "success" {
		t.Errorf("victim phase = %q", ph)
	}
}

// A trap pod writes a placement of its own: bind-phase allocating, an old
// bind time, the victim's GPU, 0 MiB. Before: with no lock naming another
// pod it was taken first (oldest bind time), so the victim's container got
// the trap's limit (none) and the trap's cache directory, and deleting the
// trap had the sweep remove the victim's live directory. Now: the call is
// refused while the trap waits (Event on the trap), the victim is allocated
// normally into its own directory, and deleting the trap sweeps nothing of
// the victim's.
func TestAllocateRefusesATrapPod(t *testing.T) {
	for _, withLock := range []bool{true, false} {
		t.Run(map[bool]string{true: "victim holds the lock", false: "no lock"}[withLock], func(t *testing.T) {
			trap := mkPod("trap", 1, "GPU-a,NVIDIA,0,0:;", nil, gpuCtr("main", 0))
			victim := mkPod("victim", 1000, "GPU-a,NVIDIA,1000,0:;", nil, gpuCtr("main", 1000))
			objs := []runtime.Object{trap, victim}
			if withLock {
				objs = append(objs, lockOn("victim"))
			} else {
				objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
			}
			e := setup(t, nil, objs...)
			_, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0")
			if err == nil || !strings.Contains(err.Error(), "default/trap") {
				t.Fatalf("err = %v, want a refusal naming pod default/trap", err)
			}
			if w := e.warnings("default/trap: refused: the kubelet may be admitting this pod, which has a placement not named by the node lock"); len(w) != 1 {
				t.Errorf("events = %v, want one warning on the trap", e.events.events)
			}
			e.noLimits("uid-trap_main")
			if ph := e.pod("default", "trap").Annotations[annotations.BindPhase]; ph != "failed" {
				t.Errorf("trap phase = %q, want failed", ph)
			}
			if !withLock {
				return // no scheduler placement at all: nothing is allocated
			}
			r, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0")
			if err != nil {
				t.Fatal(err)
			}
			dir := cacheDir(t, r)
			if filepath.Base(dir) != "uid-victim_main" || r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
				t.Fatalf("victim got cache dir %s and envs %v", dir, r.Envs)
			}
			if err := e.kube.CoreV1().Pods("default").Delete(e.ctx, "trap", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			s := &monitor.Sweeper{Dir: paths.ContainersDir(e.hook), API: &monitor.APIPods{Kube: e.kube, NodeName: node}, Logger: klog.Background()}
			if _, err := s.Sweep(e.ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(dir); err != nil {
				t.Fatalf("the victim's live cache directory is gone after the trap's deletion: %v", err)
			}
		})
	}
}

// cacheDir is the host side of the response's /usr/local/vgpu mount.
func cacheDir(t *testing.T, r *pluginapi.ContainerAllocateResponse) string {
	t.Helper()
	for _, m := range r.Mounts {
		if m.ContainerPath == paths.ContainerVGPUDir {
			return m.HostPath
		}
	}
	t.Fatalf("no %s mount in %v", paths.ContainerVGPUDir, mountPaths(r))
	return ""
}

// MIG mode on a GPU the device table lists as a full GPU: NVIDIA_VISIBLE_DEVICES
// came from the placement ("all", another GPU). Now the device identities
// are the kubelet's, from the device table, and a full GPU on a MIG node is
// refused (no HAMi-core limit applies in MIG mode).
func TestAllocateMIGNeverTakesTheDeviceFromThePlacement(t *testing.T) {
	for _, placed := range []string{"all", "GPU-b", "MIG-1"} {
		t.Run(placed, func(t *testing.T) {
			e := setup(t, func(_ *deviceplugin.Options, a *allocate.Options) { a.OperatingMode = v1.OperatingModeMIG },
				lockOn("p"), mkPod("p", 1, placed+",NVIDIA,1000,0:;", nil))
			r, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0")
			if err == nil {
				t.Fatalf("a full GPU on a MIG node was handed out: envs %v", r.Envs)
			}
			if !strings.Contains(err.Error(), "not a MIG device") {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// An API call that fails for a moment (here the patch that hands out the
// entry) is not a verdict on the pod: it stays allocating with its entry and
// its lock, and the kubelet's retry, after a kubelet restart, succeeds.
// Before: the pod was marked failed and the retry was refused.
func TestAllocateRetryAfterATransientFailureSucceeds(t *testing.T) {
	e := setup(t, nil, lockOn("p"), mkPod("p", 1, "GPU-a,NVIDIA,1000,0:;", nil, gpuCtr("main", 1000)))
	failed := false
	e.kube.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if pa, ok := a.(k8stesting.PatchAction); ok && !failed && strings.Contains(string(pa.GetPatch()), annotations.DevicesToAllocate) {
			failed = true
			return true, nil, errors.New("the server was unable to return a response in the time allotted")
		}
		return false, nil, nil
	})
	if _, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0"); err == nil {
		t.Fatal("the first call succeeded although its patch failed")
	}
	p := e.pod("default", "p")
	if p.Annotations[annotations.BindPhase] != "allocating" || p.Annotations[annotations.DevicesToAllocate] != "GPU-a,NVIDIA,1000,0:;" {
		t.Fatalf("after a transient failure: %v", p.Annotations)
	}
	if err := e.kl.Restart(); err != nil {
		t.Fatal(err)
	}
	e.reconnect()
	if _, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0"); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if v := e.limits("uid-p_main"); v["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
		t.Fatalf("file = %v", v)
	}
	if ph := e.pod("default", "p").Annotations[annotations.BindPhase]; ph != "success" {
		t.Fatalf("phase = %q", ph)
	}
}

// silentAPIServer accepts connections and never answers: the API server
// that held every Allocate before (no client timeout, one lock).
func silentAPIServer(t testing.TB) kubernetes.Interface {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never read or written
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// Every Allocate ends within the configured API timeout under an API server
// that never answers, each on its own: none waits behind another's API call.
func TestAllocateBoundedUnderASilentAPIServer(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e := setupKube(t, func(o *deviceplugin.Options, _ *allocate.Options) { o.APITimeout = timeout }, silentAPIServer(t))
	const n = 8
	took := make(chan time.Duration, n)
	for range n {
		go func() {
			start := time.Now()
			_, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0")
			if err == nil {
				t.Error("allocated without an API server")
			}
			took <- time.Since(start)
		}()
	}
	guard := time.After(30 * time.Second)
	for range n {
		select {
		case d := <-took:
			// Generous for a loaded CI machine; the benchmark has the figure.
			if d > timeout+10*time.Second {
				t.Errorf("an Allocate took %v under a %v API timeout", d, timeout)
			}
		case <-guard:
			t.Fatal("Allocate calls still blocked after 30 s by an API server that never answers")
		}
	}
}
