//go:build kind

package e2e

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/limitbed/limitbed/fakegpu/profile"
	"github.com/limitbed/limitbed/harness/kindcluster"
	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/internal/tier"
	"github.com/limitbed/limitbed/plugin/annotations"
	"github.com/limitbed/limitbed/plugin/launch"
	"github.com/limitbed/limitbed/plugin/nvsmi"
)

const (
	testNamespace = "default"
	toolsDir      = "/opt/fakegpu/bin"
	cudaprobe     = toolsDir + "/cudaprobe"
	vgpuDir       = "/usr/local/vgpu" // on the node: the chart's default gpuHookPath + /vgpu
)

// profileUUID reads the first device's uuid from a fakegpu profile.
func profileUUID(path string) (string, error) {
	p, err := profile.Load(path)
	if err != nil {
		return "", err
	}
	return p.Devices[0].UUID, nil
}

// profileMIGs reads every MIG instance of a fakegpu profile, device by device.
func profileMIGs(path string) ([]profile.MIG, error) {
	p, err := profile.Load(path)
	if err != nil {
		return nil, err
	}
	var migs []profile.MIG
	for _, d := range p.Devices {
		migs = append(migs, d.MIG...)
	}
	if len(migs) == 0 {
		return nil, fmt.Errorf("%s: no MIG instance", path)
	}
	return migs, nil
}

// waitGPUs waits until node advertises nvidia.com/gpu (the plugin registered with the kubelet).
func waitGPUs(ctx context.Context, c *kindcluster.Cluster, node string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		q, ok := n.Status.Allocatable["nvidia.com/gpu"]
		return ok && !q.IsZero(), nil
	})
	if err != nil {
		return fmt.Errorf("node %s never advertised nvidia.com/gpu: %w", node, err)
	}
	return nil
}

// podName turns a test name into a pod name.
func podName(t *testing.T) string {
	s := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "-"))
	s = strings.Trim(strings.TrimPrefix(s, "testkind"), "-")
	if len(s) > 50 {
		s = s[:50]
	}
	return "gpu-" + strings.Trim(s, "-")
}

// gpuPod creates a workload pod asking for one vGPU with memMiB, has the "scheduler" bind it to
// worker node with the fake GPU, waits for it to run and returns its container. The pod is deleted
// when the test ends.
func gpuPod(t *testing.T, e *testEnv, worker int, memMiB int32, ann map[string]string) *kindcluster.PodContainer {
	t.Helper()
	return gpuPodOn(t, e, worker, e.gpuUUID, memMiB, ann)
}

// gpuPodOn is gpuPod with the device the "scheduler" assigns: a GPU's UUID, or a MIG instance's.
func gpuPodOn(t *testing.T, e *testEnv, worker int, uuid string, memMiB int32, ann map[string]string) *kindcluster.PodContainer {
	t.Helper()
	return gpuPodNamed(t, e, worker, uuid, podName(t), memMiB, ann)
}

// gpuPodNamed is gpuPodOn with the pod's name (for a test that needs several pods).
func gpuPodNamed(t *testing.T, e *testEnv, worker int, uuid, name string, memMiB int32, ann map[string]string) *kindcluster.PodContainer {
	t.Helper()
	return gpuPodSpec(t, e, worker, uuid, name, memMiB, ann, nil)
}

// gpuPodSpec is gpuPodNamed with variables in the container spec's env (which the kubelet applies
// after the device plugin's).
func gpuPodSpec(t *testing.T, e *testEnv, worker int, uuid, name string, memMiB int32, ann, env map[string]string) *kindcluster.PodContainer {
	t.Helper()
	return gpuPodReq(t, e, gpuReq{worker: worker, uuid: uuid, name: name, memMiB: memMiB, ann: ann, env: env})
}

// gpuReq is what a workload pod asks for: one vGPU of the device uuid on a worker, with memMiB
// and, when cores is set, a compute limit (nvidia.com/gpucores, the placement's cores).
type gpuReq struct {
	worker        int
	uuid, name    string
	memMiB, cores int32
	ann, env      map[string]string
}

// gpuPodReq creates the pod r asks for, has the "scheduler" bind it to its worker node with the
// device, waits for it to run and returns its container. The pod is deleted when the test ends.
func gpuPodReq(t *testing.T, e *testEnv, r gpuReq) *kindcluster.PodContainer {
	t.Helper()
	ctx := t.Context()
	node := e.c.Worker(r.worker)
	hostTools := corev1.HostPathDirectory
	grace := int64(1)
	limits := corev1.ResourceList{
		"nvidia.com/gpu":    resource.MustParse("1"),
		"nvidia.com/gpumem": *resource.NewQuantity(int64(r.memMiB), resource.DecimalSI),
	}
	if r.cores > 0 {
		limits["nvidia.com/gpucores"] = *resource.NewQuantity(int64(r.cores), resource.DecimalSI)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: r.name, Namespace: testNamespace, Annotations: r.ann},
		Spec: corev1.PodSpec{
			SchedulerName:                 kindcluster.SchedulerName,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "main", Image: sandbox.WorkloadImage, ImagePullPolicy: corev1.PullNever,
				Resources:    corev1.ResourceRequirements{Limits: limits},
				VolumeMounts: []corev1.VolumeMount{{Name: "fakegpu-tools", MountPath: toolsDir, ReadOnly: true}},
				Env:          specEnv(r.env),
			}},
			Volumes: []corev1.Volume{{Name: "fakegpu-tools", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: vgpuDir + "/fakegpu/bin", Type: &hostTools}}}},
		},
	}
	created, err := e.c.Kube.CoreV1().Pods(testNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", r.name, err)
	}
	t.Cleanup(func() {
		if err := e.c.DeletePod(context.WithoutCancel(ctx), testNamespace, r.name); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	devs := annotations.PodDevices{{{UUID: r.uuid, Type: "NVIDIA", UsedMem: r.memMiB, UsedCores: r.cores}}}
	if err := kindcluster.Bind(ctx, e.c.Scheduler, created, node, devs); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.WaitPodRunning(ctx, testNamespace, r.name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	pc, err := e.c.PodContainer(ctx, testNamespace, r.name, "main")
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

// smiTag marks the real nvidia-smi's memory totals in a probe's output (the workload image carries
// nvidia-smi where the build machine had Debian's package: scripts/workload-image.sh).
const smiTag = "nvidia-smi-total"

// probe runs cudaprobe --mib mib through method m and returns its report; in the same session,
// where the image has nvidia-smi, its memory totals too (smiTotal).
func probe(t *testing.T, c sandbox.Container, method string, mib int) launch.Result {
	t.Helper()
	return probeWithEnv(t, c, method, "", mib)
}

// probeWithEnv is probe with env ("NAME=value ...", may be empty) set for cudaprobe and nvidia-smi
// alike: a tenant's variables reach every program of its session.
func probeWithEnv(t *testing.T, c sandbox.Container, method, env string, mib int) launch.Result {
	t.Helper()
	m, err := launch.Lookup(method)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Second)
	defer cancel()
	run := ""
	if env != "" {
		run = "env " + env + " "
	}
	smi := fmt.Sprintf("if [ -x %s ]; then echo \"%s $(%s%s 2>/dev/null | tr '\\n' ' ')\"; fi", nvsmi.ContainerPath, smiTag, run, nvsmi.TotalsCommand(nvsmi.ContainerPath))
	res, err := launch.Run(ctx, c, m, fmt.Sprintf("%s%s --mib %d; rc=$?; %s; exit $rc", run, cudaprobe, mib, smi))
	if err != nil {
		t.Fatalf("%s %s: %v", method, env, err)
	}
	if res.Probe == nil {
		t.Fatalf("%s: no cudaprobe report (exit %d)\nstdout: %s\nstderr: %s\nlauncher: %s %s",
			method, res.ExitCode, res.Stdout, res.Stderr, res.Launcher.Stdout, res.Launcher.Stderr)
	}
	return res
}

// smiTotal is the first GPU's memory total nvidia-smi printed in r's session; ok false when the
// image has no nvidia-smi (a failure under CI=true, whose workload image has it).
func smiTotal(t *testing.T, method string, r launch.Result) (int, bool) {
	t.Helper()
	for _, line := range strings.Split(string(r.Stdout), "\n") {
		body, found := strings.CutPrefix(line, smiTag+" ")
		if !found {
			continue
		}
		totals, err := nvsmi.ParseTotals([]byte(body))
		if err != nil {
			t.Errorf("%s: nvidia-smi: %v", method, err)
			return 0, false
		}
		return int(totals[0]), true
	}
	if tier.CI() {
		t.Errorf("%s: the workload image has no %s (CI builds it with Debian's package)", method, nvsmi.ContainerPath)
	}
	return 0, false
}

func num(r launch.Result, key string) float64 {
	v, _ := r.Probe[key].(float64)
	return v
}

// wantRefused asserts that the allocation was refused and the device looks like the limit.
func wantRefused(t *testing.T, method string, r launch.Result, limitMiB int) {
	t.Helper()
	if got := num(r, "granted_mib"); got >= num(r, "requested_mib") {
		t.Errorf("%s: granted %v MiB of %v MiB under a %d MiB limit (user %s)\nreport: %s\nstderr: %s",
			method, got, num(r, "requested_mib"), limitMiB, r.User, r.ProbeJSON, r.Stderr)
	}
	if got := num(r, "total_mib"); int(got) != limitMiB {
		t.Errorf("%s: device total %v MiB, want the %d MiB limit\nreport: %s", method, got, limitMiB, r.ProbeJSON)
	}
	if got, ok := smiTotal(t, method, r); ok && got != limitMiB {
		t.Errorf("%s: the real nvidia-smi shows %d MiB, want the %d MiB limit", method, got, limitMiB)
	}
}

// wantGranted asserts that the allocation succeeded against the whole device (no limit applied).
func wantGranted(t *testing.T, method string, r launch.Result) {
	t.Helper()
	if got := num(r, "granted_mib"); got != num(r, "requested_mib") {
		t.Errorf("%s: granted %v of %v MiB, want all of it (env mode does not reach this session)\nreport: %s\nstderr: %s",
			method, got, num(r, "requested_mib"), r.ProbeJSON, r.Stderr)
	}
}

// nodeLimitsFile returns the content of the pod container's .limits file on its node, or "" when
// there is none.
func nodeLimitsFile(t *testing.T, e *testEnv, node string, pc *kindcluster.PodContainer) string {
	t.Helper()
	p, err := e.c.Kube.CoreV1().Pods(pc.Namespace).Get(t.Context(), pc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("%s/containers/%s_%s.limits", vgpuDir, p.UID, pc.Container)
	out, err := e.c.NodeExec(t.Context(), node, "sh", "-c", "cat "+path+" 2>/dev/null || true")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func sandboxOpts() sandbox.ExecOptions { return sandbox.ExecOptions{} }

// waitPluginRegistered waits until the device plugin on node has registered with the kubelet after
// since (its log says so), and then for the node to advertise GPUs again. After a plugin or kubelet
// restart the node status can still show the old, now unhealthy devices; the kubelet's own view is
// what admits pods.
func waitPluginRegistered(ctx context.Context, e *testEnv, node string, since time.Time) error {
	sinceTime := metav1.NewTime(since.Add(-time.Second))
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.c.Kube.CoreV1().Pods(e.release.Namespace).List(ctx, metav1.ListOptions{
			FieldSelector: "spec.nodeName=" + node, LabelSelector: "app.kubernetes.io/name=limitbed"})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
				continue
			}
			logs, err := e.c.Kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{
				Container: "device-plugin", SinceTime: &sinceTime}).DoRaw(ctx)
			if err == nil && strings.Contains(string(logs), "Registered with kubelet") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("device plugin on %s did not register with the kubelet after %s: %w", node, since.Format(time.RFC3339), err)
	}
	time.Sleep(3 * time.Second) // the kubelet connects back and receives the device list
	return waitGPUs(ctx, e.c, node, time.Minute)
}

func specEnv(env map[string]string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, corev1.EnvVar{Name: k, Value: env[k]})
	}
	return out
}
