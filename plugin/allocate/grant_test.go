package allocate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/limitbed/limitbed/plugin/annotations"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/schedproto"
)

var (
	gpu0 = annotations.ContainerDevice{UUID: "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50", Type: "NVIDIA", UsedMem: 3000, UsedCores: 30}
	gpu1 = annotations.ContainerDevice{UUID: "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f51", Type: "NVIDIA", UsedMem: 3000, UsedCores: 30}
)

// With the compute scheduler on, a container gets its grant file, root's, outside its
// read-write directory, naming its GPUs in its device order with every entry off, mounted
// read-only at the path compiled into libvgpu.so.
func TestGrantFile(t *testing.T) {
	a, hook := newAllocator(t, func(o *Options) { o.ComputeScheduler = true })
	resp, err := a.Allocate(mkReq("uid1", "main", nil, gpu1, gpu0))
	if err != nil {
		t.Fatal(err)
	}
	m := mountsByPath(resp)[schedproto.ContainerGrantPath]
	want := filepath.Join(hook, "vgpu", "sched", "uid1_main.grant")
	if m == nil || m.HostPath != want || !m.ReadOnly {
		t.Fatalf("grant mount = %v, want read-only from %s", m, want)
	}
	if strings.HasPrefix(m.HostPath, filepath.Join(paths.ContainersDir(hook), "uid1_main")+"/") {
		t.Fatal("grant file inside the container's read-write directory")
	}
	data, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	gpus, words, err := schedproto.DecodeGrant(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 2 || gpus[0].String() != gpu1.UUID || gpus[1].String() != gpu0.UUID {
		t.Errorf("GPUs %v, want %s, %s", gpus, gpu1.UUID, gpu0.UUID)
	}
	for i, w := range words {
		// Wait with a silent heartbeat: the library waits for the scheduler's first word at most
		// 0.5 s, instead of pacing itself from its first launch until the scheduler's next scan.
		if _, s := schedproto.SplitWord(w); s != schedproto.Wait {
			t.Errorf("entry %d starts %v, want wait", i, s)
		}
	}
}

func TestGrantFileOnlyWithTheScheduler(t *testing.T) {
	disabled := []corev1.EnvVar{{Name: "CUDA_DISABLE_CONTROL", Value: "true"}}
	for _, tc := range []struct {
		name string
		opts func(*Options)
		env  []corev1.EnvVar
	}{
		{"scheduler off", nil, nil},
		{"hami-v2.10 profile", func(o *Options) { o.ComputeScheduler, o.Profile = true, ProfileHAMiV210 }, nil},
		{"control disabled", func(o *Options) { o.ComputeScheduler = true }, disabled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, hook := newAllocator(t, tc.opts)
			resp, err := a.Allocate(mkReq("uid1", "main", tc.env, gpu0))
			if err != nil {
				t.Fatal(err)
			}
			if m := mountsByPath(resp)[schedproto.ContainerGrantPath]; m != nil {
				t.Errorf("grant mount %v", m)
			}
			if _, err := os.Stat(schedproto.GrantPath(schedproto.GrantDir(hook), "uid1_main")); err == nil {
				t.Error("grant file written")
			}
		})
	}
}

// A device the scheduler cannot name fails the allocation, saying so and how to go on.
func TestGrantFileBadUUID(t *testing.T) {
	a, _ := newAllocator(t, func(o *Options) { o.ComputeScheduler = true })
	_, err := a.Allocate(mkReq("uid1", "main", nil, devA))
	if err == nil || !strings.Contains(err.Error(), `"GPU-a"`) || !strings.Contains(err.Error(), "--compute-scheduler=false") {
		t.Fatalf("err = %v, want it to name GPU-a and the flag", err)
	}
}
