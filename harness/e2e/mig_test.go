//go:build kind

package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A MIG node: the third worker's fake GPU is an A100 with MIG instances (fakeDriver.nodeProfiles)
// and its config.json entry sets operatingmode: mig. The "scheduler" assigns the first MIG instance
// to a pod asking for nvidia.com/gpumem: 3000; MIG isolation is the hardware's, so the plugin hands
// the instance over with nothing of HAMi-core: no limit variables, no libvgpu.so or ld.so.preload,
// no /overrideEnv, no .limits file on the node. cudaprobe sees the instance's own memory, uncapped.
func TestKindMIGNode(t *testing.T) {
	e := need(t)
	migs, err := profileMIGs(filepath.Join(e.root, "fakegpu", "profiles", migProfile+".profile"))
	if err != nil {
		t.Fatal(err)
	}
	migUUID, migMiB := migs[0].UUID, migs[0].MemoryMiB
	node := e.c.Worker(migWorker)

	// The node advertises MIG instances one to one, by their UUIDs.
	n, err := e.c.Kube.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := n.Status.Allocatable["nvidia.com/gpu"]; q.Value() != 3 {
		t.Errorf("%s advertises %s nvidia.com/gpu, want the profile's 3 MIG instances", node, q.String())
	}

	pc := gpuPodOn(t, e, migWorker, migUUID, 3000, nil)
	ctx := t.Context()

	res, err := pc.Exec(ctx, []string{"env"}, sandboxOpts())
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("env in the pod: %v (exit %d)", err, res.ExitCode)
	}
	vars := map[string]string{}
	for _, l := range strings.Split(string(res.Stdout), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			vars[k] = v
		}
	}
	for k := range vars {
		if strings.HasPrefix(k, "CUDA_DEVICE_MEMORY_LIMIT") || strings.HasPrefix(k, "CUDA_DEVICE_SM_LIMIT") ||
			k == "CUDA_DEVICE_MEMORY_SHARED_CACHE" || k == "HAMI_LIMITS_FORMAT" {
			t.Errorf("MIG pod has HAMi variable %s=%s", k, vars[k])
		}
	}
	// MIG device IDs are static kubelet resources: the kubelet picks the instance and the plugin
	// hands over what it picked (the scheduler's annotation is not consulted for them), so any of
	// the node's instances is right — but exactly one, and one of this profile's.
	var instances []string
	for _, m := range migs {
		instances = append(instances, m.UUID)
	}
	if got := vars["NVIDIA_VISIBLE_DEVICES"]; !slices.Contains(instances, got) {
		t.Errorf("NVIDIA_VISIBLE_DEVICES = %q, want one MIG instance of %v", got, instances)
	}

	for _, path := range []string{"/overrideEnv", "/usr/local/vgpu/libvgpu.so"} {
		if r, err := pc.Exec(ctx, []string{"test", "-e", path}, sandboxOpts()); err != nil || r.ExitCode == 0 {
			t.Errorf("MIG pod has %s (err %v)", path, err)
		}
	}
	// The workload image has no ld.so.preload of its own (it has an empty /usr/local/vgpu, where
	// the plugin would mount libvgpu.so): any is the plugin's.
	if r, err := pc.Exec(ctx, []string{"test", "-e", "/etc/ld.so.preload"}, sandboxOpts()); err != nil || r.ExitCode == 0 {
		got, _ := pc.ReadFile(ctx, "/etc/ld.so.preload")
		t.Errorf("MIG pod has /etc/ld.so.preload: %q (err %v)", got, err)
	}
	if limits := nodeLimitsFile(t, e, node, pc); limits != "" {
		t.Errorf("MIG mode wrote a limits file on %s: %q", node, limits)
	}
	p, err := e.c.Kube.CoreV1().Pods(pc.Namespace).Get(ctx, pc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := fmt.Sprintf("%s/containers/%s_%s", vgpuDir, p.UID, pc.Container)
	if out, err := e.c.NodeExec(ctx, node, "sh", "-c", "ls -d "+dir+" "+dir+".limits 2>/dev/null || true"); err != nil {
		t.Fatal(err)
	} else if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("MIG mode left container state on %s: %s", node, s)
	}

	// The positive control: the container's (fake) CUDA is the MIG instance, and nothing caps it
	// at the 3000 MiB of the request.
	r := probe(t, pc, "exec", 4096)
	wantGranted(t, "exec", r)
	if want := int(migMiB); int(num(r, "total_mib")) != want {
		t.Errorf("device total %v MiB, want the MIG instance's %d MiB\nreport: %s", num(r, "total_mib"), want, r.ProbeJSON)
	}
}
