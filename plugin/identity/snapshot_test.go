package identity

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/limitbed/limitbed/plugin/annotations"
	"github.com/limitbed/limitbed/plugin/limitsfile"
)

const (
	gpuA = "GPU-aaaaaaaa-0000-4000-8000-000000000001"
	gpuB = "GPU-bbbbbbbb-0000-4000-8000-000000000002"
	migC = "MIG-cccccccc-0000-4000-8000-000000000003"
)

type devices struct {
	list []ContainerDevices
	err  error
}

func (d devices) ContainerDevices(context.Context) ([]ContainerDevices, error) { return d.list, d.err }

// nodePods is the API server's pods of the node (its client, kubesource.APIServer, is held to
// listing this node's pods only by its own test).
type nodePods []*corev1.Pod

func (n nodePods) NodePods(context.Context) ([]corev1.Pod, error) {
	out := make([]corev1.Pod, len(n))
	for i, p := range n {
		out[i] = *p
	}
	return out, nil
}

func pod(name, uid, node string, placed annotations.PodDevices, ctrs ...corev1.Container) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, UID: types.UID(uid),
			Annotations: map[string]string{annotations.DevicesAllocated: placed.Encode()}},
		Spec: corev1.PodSpec{NodeName: node, Containers: ctrs},
	}
	for i, c := range ctrs {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, ContainerID: "containerd://" + strings.Repeat(string(rune('a'+i)), 8) + name})
	}
	return p
}

func writeLimits(t *testing.T, dir, key, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, key+limitsfile.Suffix), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshot joins the three sources: the kubelet's device set in the
// scheduler's order, the limits file over the placement, env-mode limits
// from the placement and the spec, and what is left unknown when a source
// fails. A container's own files or region play no part.
func TestSnapshot(t *testing.T) {
	dir := t.TempDir()
	const u1, u2, u3 = "11111111-0000-4000-8000-000000000001", "22222222-0000-4000-8000-000000000002", "33333333-0000-4000-8000-000000000003"
	kube := nodePods{
		// file mode, two GPUs placed B then A; the kubelet lists A first.
		pod("two", u1, "n1", annotations.PodDevices{{{UUID: gpuB, UsedMem: 1000}, {UUID: gpuA, UsedMem: 2000}}},
			corev1.Container{Name: "main"}),
		// env mode (no file): the placement's limits, the spec's policy and priority.
		pod("env", u2, "n1", annotations.PodDevices{{{UUID: gpuA, UsedMem: 3000, UsedCores: 30}}, {}},
			corev1.Container{Name: "gpu", Env: []corev1.EnvVar{{Name: "CUDA_TASK_PRIORITY", Value: "0"}, {Name: "GPU_CORE_UTILIZATION_POLICY", Value: "force"}}},
			corev1.Container{Name: "sidecar"}),
		// MIG.
		pod("mig", u3, "n1", annotations.PodDevices{{{UUID: migC}}}, corev1.Container{Name: "main"}),
	}
	writeLimits(t, dir, u1+"_main", "CUDA_DEVICE_MEMORY_LIMIT_0=1000m\nCUDA_DEVICE_MEMORY_LIMIT_1=2000m\nCUDA_DEVICE_SM_LIMIT=50\nCUDA_TASK_PRIORITY=2\n")
	// The pod's region and its environment would say anything; nothing reads them.
	devs := devices{list: []ContainerDevices{
		{Namespace: "team", Pod: "two", Container: "main", Resource: "nvidia.com/gpu", DeviceIDs: []string{DeviceID(gpuA, 4), DeviceID(gpuB, 1)}},
		{Namespace: "team", Pod: "env", Container: "gpu", Resource: "nvidia.com/gpu", DeviceIDs: []string{DeviceID(gpuA, 0)}},
		{Namespace: "team", Pod: "env", Container: "sidecar", Resource: "example.com/other", DeviceIDs: []string{"x"}},
		{Namespace: "team", Pod: "mig", Container: "main", Resource: "nvidia.com/gpu", DeviceIDs: []string{migC}},
	}}
	known := map[string]bool{gpuA: true, gpuB: true, migC: true}
	src := &Sources{Pods: kube, Devices: devs, ContainersDir: dir, KnownGPUs: known}
	snap, err := src.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Warnings) != 0 {
		t.Errorf("warnings: %v", snap.Warnings)
	}
	var keys []string
	for _, c := range snap.Containers() {
		keys = append(keys, c.Key.String())
	}
	if want := []string{u1 + "_main", u2 + "_gpu", u2 + "_sidecar", u3 + "_main"}; !cmp.Equal(keys, want) {
		t.Fatalf("containers %v, want %v", keys, want)
	}
	two, _ := snap.Container(Key{u1, "main"})
	if got := gpuUUIDs(two); !cmp.Equal(got, []string{gpuB, gpuA}) || !two.Ordered || two.GPUSource != SourceKubelet {
		t.Errorf("two: GPUs %v ordered %v source %q; want [B A] in the scheduler's order, from the kubelet", got, two.Ordered, two.GPUSource)
	}
	if two.Limits.Source != SourceFile || two.MemoryLimit(gpuB) != 1000<<20 || two.MemoryLimit(gpuA) != 2000<<20 || two.Limits.SM != 50 || two.Limits.Priority != 2 {
		t.Errorf("two: limits %+v, B %d, A %d", two.Limits, two.MemoryLimit(gpuB), two.MemoryLimit(gpuA))
	}
	if c, ok := snap.ByID("aaaaaaaatwo"); !ok || c != two {
		t.Errorf("ByID: %v %v", c, ok)
	}
	env, _ := snap.Container(Key{u2, "gpu"})
	if env.Limits.Source != SourceAnnotation || env.MemoryLimit(gpuA) != 3000<<20 || env.Limits.SM != 30 || env.Limits.Policy != "force" || env.Limits.Priority != 0 {
		t.Errorf("env: limits %+v", env.Limits)
	}
	side, _ := snap.Container(Key{u2, "sidecar"})
	if len(side.GPUs) != 0 || side.GPUSource != SourceKubelet || side.Limits.Source != SourceNone {
		t.Errorf("sidecar: %+v", side)
	}
	mig, _ := snap.Container(Key{u3, "main"})
	if !mig.MIG || !mig.Holds(migC) || mig.Limits.Source != SourceNone {
		t.Errorf("mig: %+v", mig)
	}

	t.Run("process lookup", func(t *testing.T) {
		for _, c := range []struct {
			p    Process
			want *Container
		}{
			{Process{PodUID: u1, ContainerID: "aaaaaaaatwo"}, two},
			{Process{ContainerID: "aaaaaaaatwo"}, two}, // Docker's hierarchy names no pod
			{Process{PodUID: u2, ContainerID: "aaaaaaaatwo"}, nil},
			{Process{PodUID: u1}, nil},
			{Process{}, nil},
		} {
			got, ok := snap.Of(c.p)
			if (c.want == nil) == ok || (ok && got != c.want) {
				t.Errorf("Of(%+v) = %v, %v; want %v", c.p, got, ok, c.want)
			}
		}
	})

	t.Run("kubelet down: GPUs from the placement, with a warning", func(t *testing.T) {
		src := *src
		src.Devices = devices{err: errors.New("connection refused")}
		snap, err := src.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		two, _ := snap.Container(Key{u1, "main"})
		if len(snap.Warnings) != 1 || two.GPUSource != SourceAnnotation || !cmp.Equal(gpuUUIDs(two), []string{gpuB, gpuA}) {
			t.Errorf("warnings %v, GPUs %v from %q", snap.Warnings, gpuUUIDs(two), two.GPUSource)
		}
	})

	t.Run("a device the driver does not list: GPUs unknown", func(t *testing.T) {
		src := *src
		src.KnownGPUs = map[string]bool{gpuB: true}
		snap, _ := src.Snapshot(context.Background())
		two, _ := snap.Container(Key{u1, "main"})
		if two.GPUSource != SourceNone || len(two.GPUs) != 0 || len(snap.Warnings) == 0 {
			t.Errorf("GPUs %v from %q, warnings %v", gpuUUIDs(two), two.GPUSource, snap.Warnings)
		}
	})

	t.Run("placement disagrees with the kubelet: strictest limit", func(t *testing.T) {
		src := *src
		src.Devices = devices{list: []ContainerDevices{{Namespace: "team", Pod: "two", Container: "main", Resource: "nvidia.com/gpu",
			DeviceIDs: []string{DeviceID(gpuA, 0), DeviceID(migC, 0)}}}}
		src.KnownGPUs = nil
		snap, _ := src.Snapshot(context.Background())
		two, _ := snap.Container(Key{u1, "main"})
		if two.Ordered || two.MemoryLimit(gpuA) != 1000<<20 {
			t.Errorf("ordered %v, limit on A %d; want unordered and the strictest (1000 MiB)", two.Ordered, two.MemoryLimit(gpuA))
		}
	})

	t.Run("unreadable limits file: unknown, never guessed", func(t *testing.T) {
		p := filepath.Join(dir, u1+"_main"+limitsfile.Suffix)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
		snap, _ := src.Snapshot(context.Background())
		two, _ := snap.Container(Key{u1, "main"})
		if two.Limits.Source != SourceUnreadable || len(snap.Warnings) != 1 {
			t.Errorf("limits %+v, warnings %v", two.Limits, snap.Warnings)
		}
	})

	t.Run("API server down: no snapshot", func(t *testing.T) {
		src := &Sources{Pods: failingPods{}}
		if _, err := src.Snapshot(context.Background()); err == nil {
			t.Error("a snapshot without the API server")
		}
	})
}

type failingPods struct{}

func (failingPods) NodePods(context.Context) ([]corev1.Pod, error) {
	return nil, errors.New("unreachable")
}

func gpuUUIDs(c *Container) []string {
	var out []string
	for _, g := range c.GPUs {
		out = append(out, g.UUID)
	}
	return out
}

type countingSource struct{ n int }

func (c *countingSource) Snapshot(context.Context) (*Snapshot, error) {
	c.n++
	if c.n == 3 {
		return nil, errors.New("down")
	}
	return NewSnapshot(time.Unix(int64(c.n), 0), nil), nil
}

func TestCached(t *testing.T) {
	src := &countingSource{}
	now := time.Unix(100, 0)
	c := &Cached{Source: src, MaxAge: time.Second, Now: func() time.Time { return now }}
	a, _ := c.Snapshot(context.Background())
	b, _ := c.Snapshot(context.Background())
	if a != b || src.n != 1 {
		t.Fatalf("within MaxAge: %d reads", src.n)
	}
	now = now.Add(time.Second)
	if b, _ = c.Snapshot(context.Background()); b == a || src.n != 2 {
		t.Fatalf("after MaxAge: %d reads", src.n)
	}
	now = now.Add(time.Second)
	if _, err := c.Snapshot(context.Background()); err == nil {
		t.Fatal("a failure was hidden by the cache")
	}
	if s, err := c.Snapshot(context.Background()); err != nil || s == b || src.n != 4 {
		t.Fatalf("after a failure: %v, %d reads", err, src.n)
	}
}
