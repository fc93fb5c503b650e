//go:build kind

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/limitbed/limitbed/harness/kindcluster"
	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/internal/tier"
	"github.com/limitbed/limitbed/plugin/annotations"
	"github.com/limitbed/limitbed/plugin/doctor"
)

// TestKindDoctor: limitbed-doctor, through the API server like the CLI, passes a healthy pod and
// names the planted fault of each broken one: a library from another build, no preload mount, a
// malformed limits file, an env-mode pod reached by ssh, and a MIG pod (no library: not a fault);
// and it passes the file-mode worker node.
func TestKindDoctor(t *testing.T) {
	e := need(t)
	cl, err := doctor.NewAPICluster(e.c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	d := &doctor.Doctor{Cluster: cl, PluginNamespace: "limitbed-system", GPUTool: toolsDir + "/gpuinfo"}
	run := func(t *testing.T, pc *kindcluster.PodContainer) *doctor.Report {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		rep, err := d.Pod(ctx, pc.Namespace, pc.Name, pc.Container)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_ = rep.WriteText(&b)
		t.Logf("limitbed-doctor --namespace %s --pod %s\n%s", pc.Namespace, pc.Name, b.String())
		return rep
	}
	named := func(t *testing.T, rep *doctor.Report, check string, v doctor.Verdict, mention string) {
		t.Helper()
		c, ok := rep.Check(check)
		if !ok || c.Verdict != v || !strings.Contains(c.Detail+" "+c.Cause, mention) {
			t.Errorf("%s = %+v, want %s naming %q", check, c, v, mention)
		}
	}

	// The library subtest replaces the node's libvgpu.so for a moment: it runs alone, first.
	t.Run("library from another build", func(t *testing.T) {
		pc := gpuPod(t, e, fileWorker, 3000, nil)
		node := e.c.Worker(fileWorker)
		lib := vgpuDir + "/libvgpu.so"
		// Replace by rename, as an upgrade does: the running pod keeps the file it mounted.
		if out, err := e.c.NodeExec(t.Context(), node, "sh", "-c",
			"ln -f "+lib+" "+lib+".doctor-keep && cp "+lib+" "+lib+".doctor-new && printf 'other build' >>"+lib+".doctor-new && mv -f "+lib+".doctor-new "+lib); err != nil {
			t.Fatalf("plant another build: %v\n%s", err, out)
		}
		defer func() {
			if out, err := e.c.NodeExec(context.WithoutCancel(t.Context()), node, "mv", "-f", lib+".doctor-keep", lib); err != nil {
				t.Errorf("restore the node's library: %v\n%s", err, out)
			}
		}()
		rep := run(t, pc)
		named(t, rep, "library", doctor.Fail, "a library from another build")
		if !rep.Failed() {
			t.Error("the report did not fail")
		}
	})

	// The node checks run before the parallel pods below exist (the bypass pod would count as a
	// live GPU container without a limits file).
	t.Run("node", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		rep, err := d.Node(ctx, e.c.Worker(fileWorker))
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_ = rep.WriteText(&b)
		t.Logf("limitbed-doctor --node %s\n%s", e.c.Worker(fileWorker), b.String())
		for _, name := range []string{"plugin", "library", "monitor", "driver-truth"} {
			named(t, rep, name, doctor.OK, "")
		}
		if rep.Failed() {
			t.Error("the node failed")
		}
	})

	t.Run("healthy", func(t *testing.T) {
		t.Parallel()
		pc := gpuPod(t, e, fileWorker, 3000, nil)
		probe(t, pc, "exec", 100) // the first process creates the usage region
		rep := run(t, pc)
		for _, c := range rep.Checks {
			if c.Verdict != doctor.OK {
				t.Errorf("%s: %s %s (%s)", c.Name, c.Verdict, c.Detail, c.Cause)
			}
		}
		if len(rep.Checks) != 9 || rep.Failed() {
			t.Errorf("healthy pod: %d checks, failed %v", len(rep.Checks), rep.Failed())
		}
		named(t, rep, "usage-cache", doctor.OK, "limitbed layout")
		named(t, rep, "login-view", doctor.OK, "the login session sees 3000 MiB")

		// Without --gpu-tool the doctor finds the real nvidia-smi in the image's PATH (gpuinfo is
		// mounted outside it) and both sessions must show the limit through it too.
		smiDoctor := *d
		smiDoctor.GPUTool = ""
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		rep, err := smiDoctor.Pod(ctx, pc.Namespace, pc.Name, pc.Container)
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := rep.Check("exec-view"); c.Verdict == doctor.Warn && strings.Contains(c.Detail, "neither gpuinfo nor nvidia-smi") {
			if tier.CI() {
				t.Errorf("the workload image has no nvidia-smi (CI builds it with Debian's package): %s", c.Detail)
			}
			t.Logf("the doctor's nvidia-smi views not checked: %s", c.Detail)
			return
		}
		named(t, rep, "exec-view", doctor.OK, "3000 MiB (nvidia-smi)")
		named(t, rep, "login-view", doctor.OK, "the login session sees 3000 MiB (nvidia-smi)")
	})

	t.Run("malformed limits file", func(t *testing.T) {
		t.Parallel()
		pc := gpuPod(t, e, fileWorker, 3000, nil)
		p, err := e.c.Kube.CoreV1().Pods(pc.Namespace).Get(t.Context(), pc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A hand edit on the node, in place: the pod's read-only mount shows the same file.
		path := vgpuDir + "/containers/" + string(p.UID) + "_main.limits"
		if out, err := e.c.NodeExec(t.Context(), e.c.Worker(fileWorker), "sh", "-c", "echo 'edited by hand' >>"+path); err != nil {
			t.Fatalf("plant: %v\n%s", err, out)
		}
		rep := run(t, pc)
		named(t, rep, "limits-file", doctor.Fail, "malformed limits file: line")
	})

	t.Run("env-mode pod reached by ssh", func(t *testing.T) {
		t.Parallel()
		pc := gpuPod(t, e, envWorker, 3000, nil)
		rep := run(t, pc)
		named(t, rep, "delivery", doctor.Warn, "limitDelivery env from the node config")
		named(t, rep, "limits-file", doctor.Warn, "env mode: no /overrideEnv")
		named(t, rep, "exec-view", doctor.OK, "the exec session sees 3000 MiB")
		named(t, rep, "login-view", doctor.Fail, "and the pod runs in env mode")
	})

	// The attack suite's env-mode finding: a pod whose own spec sets the limit variable keeps it
	// (the kubelet applies the spec's env after the plugin's), and escapes its 3000 MiB.
	t.Run("env-mode pod escaped through its own spec's variable", func(t *testing.T) {
		t.Parallel()
		pc := gpuPodSpec(t, e, envWorker, e.gpuUUID, podName(t), 3000, nil, map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "16000m"})
		rep := run(t, pc)
		named(t, rep, "limits-file", doctor.Fail, "the scheduler assigned 3000 MiB")
	})

	t.Run("MIG pod", func(t *testing.T) {
		t.Parallel()
		migs, err := profileMIGs(filepath.Join(e.root, "fakegpu", "profiles", migProfile+".profile"))
		if err != nil {
			t.Fatal(err)
		}
		migUUID := migs[0].UUID
		pc := gpuPodOn(t, e, migWorker, migUUID, 3000, nil)
		rep := run(t, pc)
		named(t, rep, "delivery", doctor.Warn, "MIG")
		named(t, rep, "preload", doctor.OK, "skipped: MIG pod")
		if rep.Failed() {
			t.Error("a MIG pod failed")
		}
	})

	t.Run("no preload mount", func(t *testing.T) {
		t.Parallel()
		pc := bypassPod(t, e, fileWorker)
		rep := run(t, pc)
		named(t, rep, "resources", doctor.Fail, "asks for no nvidia.com/gpu")
		named(t, rep, "preload", doctor.Fail, "preload mount is missing")
	})
}

// bypassPod runs the workload image on a GPU worker with the scheduler's annotations but without
// the GPU resource: kubelet never asks the plugin, so the pod has none of its mounts.
func bypassPod(t *testing.T, e *testEnv, worker int) *kindcluster.PodContainer {
	t.Helper()
	ctx := t.Context()
	name := podName(t)
	grace := int64(1)
	enc := annotations.PodDevices{{{UUID: e.gpuUUID, Type: "NVIDIA", UsedMem: 3000}}}.Encode()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace},
		Spec: corev1.PodSpec{
			NodeName:                      e.c.Worker(worker),
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "main", Image: sandbox.WorkloadImage, ImagePullPolicy: corev1.PullNever}},
		},
	}
	if _, err := e.c.Kube.CoreV1().Pods(testNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	// Placement annotations are the scheduler's to write (the chart's admission policy).
	place, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		annotations.DevicesAllocated: enc, annotations.VGPUNode: e.c.Worker(worker),
		annotations.BindPhase: string(annotations.PhaseSuccess),
	}}})
	if _, err := e.c.Scheduler.CoreV1().Pods(testNamespace).Patch(ctx, name, types.MergePatchType, place, metav1.PatchOptions{}); err != nil {
		t.Fatalf("place pod %s as the scheduler: %v", name, err)
	}
	t.Cleanup(func() {
		if err := e.c.DeletePod(context.WithoutCancel(ctx), testNamespace, name); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	if _, err := e.c.WaitPodRunning(ctx, testNamespace, name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	pc, err := e.c.PodContainer(ctx, testNamespace, name, "main")
	if err != nil {
		t.Fatal(err)
	}
	return pc
}
