package doctor

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/limitbed/limitbed/plugin/ctrexec"
	"github.com/limitbed/limitbed/plugin/launch"
)

// fakeContainer answers the commands the checks exec, from a file table and an environment.
type fakeContainer struct {
	name  string
	files map[string][]byte
	env   map[string]string
	tool  string            // what looking up gpuinfo and nvidia-smi prints (one path a line)
	views map[string]string // command line → stdout of the GPU tool
	noLs  bool
}

func (f *fakeContainer) Exec(_ context.Context, cmd []string, _ ctrexec.ExecOptions) (ctrexec.ExecResult, error) {
	switch {
	case len(cmd) == 5 && cmd[0] == "/bin/sh" && cmd[3] == "read":
		b, ok := f.files[cmd[4]]
		if !ok {
			return ctrexec.ExecResult{ExitCode: 3}, nil
		}
		return ctrexec.ExecResult{Stdout: b}, nil
	case len(cmd) == 3 && cmd[0] == "/bin/ls" && cmd[1] == "-a":
		if f.noLs {
			return ctrexec.ExecResult{ExitCode: 2, Stderr: []byte("ls: no such directory")}, nil
		}
		var names []string
		for p := range f.files {
			if rest, ok := strings.CutPrefix(p, cmd[2]+"/"); ok && !strings.Contains(rest, "/") {
				names = append(names, rest)
			}
		}
		return ctrexec.ExecResult{Stdout: []byte(".\n..\n" + strings.Join(names, "\n") + "\n")}, nil
	case len(cmd) == 1 && cmd[0] == "env":
		var b strings.Builder
		for k, v := range f.env {
			b.WriteString(k + "=" + v + "\n")
		}
		return ctrexec.ExecResult{Stdout: []byte(b.String())}, nil
	case len(cmd) == 3 && cmd[0] == "sh" && strings.Contains(cmd[2], "command -v"):
		if f.tool == "" {
			return ctrexec.ExecResult{}, nil
		}
		return ctrexec.ExecResult{Stdout: []byte(f.tool + "\n")}, nil
	case len(cmd) == 3 && cmd[0] == "sh" && cmd[1] == "-c":
		if out, ok := f.views[cmd[2]]; ok {
			return ctrexec.ExecResult{Stdout: []byte(out)}, nil
		}
	}
	return ctrexec.ExecResult{ExitCode: 127, Stderr: []byte(fmt.Sprintf("fake: no such command %q", cmd))}, nil
}

func (f *fakeContainer) ReadFile(ctx context.Context, p string) ([]byte, error) {
	if b, ok := f.files[p]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("%s: no such file", p)
}
func (f *fakeContainer) Logs(context.Context) ([]byte, error) { return nil, nil }
func (f *fakeContainer) Addr() string                         { return "" }
func (f *fakeContainer) Supports(ctrexec.Feature) bool        { return false }
func (f *fakeContainer) Backend() string                      { return "fake" }
func (f *fakeContainer) Stop(context.Context) error           { return nil }
func (f *fakeContainer) String() string                       { return f.name }

// fakeCluster is client-go's fake clientset plus containers by namespace/pod/container.
type fakeCluster struct {
	kube       *fake.Clientset
	containers map[string]*fakeContainer
	metrics    map[string]string // namespace/pod → /metrics body
}

func (f *fakeCluster) Kube() kubernetes.Interface { return f.kube }
func (f *fakeCluster) Container(_ context.Context, ns, pod, ctr string) (ctrexec.Container, error) {
	c, ok := f.containers[ns+"/"+pod+"/"+ctr]
	if !ok {
		return nil, fmt.Errorf("no container %s/%s/%s", ns, pod, ctr)
	}
	return c, nil
}
func (f *fakeCluster) ProxyGet(_ context.Context, ns, pod, port, path string) ([]byte, error) {
	b, ok := f.metrics[ns+"/"+pod]
	if !ok || port != "9394" || path != "/metrics" {
		return nil, fmt.Errorf("proxy %s/%s:%s%s: 503", ns, pod, port, path)
	}
	return []byte(b), nil
}

const (
	node       = "gpu-1"
	pluginNS   = DefaultPluginNamespace
	podUID     = "0b7ad2c5-6a3e-4f59-9a41-1d2c3e4f5a6b"
	limitsFile = "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\nCUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/usage.cache\nCUDA_DEVICE_SM_LIMIT=30\nHAMI_LIMITS_FORMAT=1\n"
	gpuinfo    = "/usr/local/bin/gpuinfo"
)

var libBuild = []byte("\x7fELF libvgpu.so build A")

func gpuinfoJSON(mib int) string {
	return fmt.Sprintf(`{"driver_version":"550.54.15","cuda_version":12040,"devices":[{"index":0,"name":"NVIDIA A16","uuid":"GPU-3c5a","memory_used_mib":0,"memory_total_mib":%d,"utilization_gpu":0,"mig_enabled":false,"mig":[],"processes":[]}]}`, mib)
}

// world is one healthy GPU pod on a node running the chart, in file mode; tests plant faults in it.
type world struct {
	objects   []runtime.Object
	workload  *fakeContainer
	plugin    *fakeContainer
	loginView string
	loginErr  error
	metrics   string
}

func healthy(region []byte) *world {
	q := func(s string) resource.Quantity { return resource.MustParse(s) }
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "train", UID: podUID, Annotations: map[string]string{
			"hami.io/vgpu-devices-allocated":   "GPU-3c5a,NVIDIA,3000,30:;",
			"hami.io/vgpu-devices-to-allocate": ";",
			"hami.io/vgpu-node":                node,
			"hami.io/bind-phase":               "success",
			"hami.io/bind-time":                "1796110000",
		}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": q("1"), "nvidia.com/gpumem": q("3000"), "nvidia.com/gpucores": q("30")},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	plugin := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: pluginNS, Name: "limitbed-x7k2p"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{
			{Name: "device-plugin", Args: []string{"--hook-path=/usr/local", "--v=2"}},
			{Name: "vgpu-monitor", Args: []string{"--metrics-address=:9394"}},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "device-plugin", Ready: true}, {Name: "vgpu-monitor", Ready: true},
		}},
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: pluginNS, Name: "limitbed"},
		Data: map[string]string{
			"device-config.yaml": "version: v1\nnvidia:\n  resourceCountName: nvidia.com/gpu\n  limitDelivery: file\n  allowPodLimitDeliveryOverride: false\n",
			"config.json":        `{"version":"v1","nodeconfig":[]}`,
		},
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Status: corev1.NodeStatus{
		Allocatable: corev1.ResourceList{"nvidia.com/gpu": q("10")},
	}}
	return &world{
		objects: []runtime.Object{pod, plugin, cm, n},
		workload: &fakeContainer{name: "team/train/main", tool: gpuinfo,
			files: map[string][]byte{
				"/etc/ld.so.preload":          []byte("/usr/local/vgpu/libvgpu.so\n"),
				"/usr/local/vgpu/libvgpu.so":  libBuild,
				"/overrideEnv":                []byte(limitsFile),
				"/usr/local/vgpu/usage.cache": region,
				"/proc/self/mountinfo": []byte("1 0 0:1 / / rw,relatime - overlay overlay rw\n" +
					"2 1 8:1 /vgpu/containers/" + podUID + "_main.limits /overrideEnv ro,relatime - ext4 /dev/sda1 rw\n"),
			},
			env: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "3000m", "CUDA_DEVICE_SM_LIMIT": "30",
				"CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/usage.cache", "NVIDIA_VISIBLE_DEVICES": "GPU-3c5a", "PATH": "/usr/bin"},
			views: map[string]string{gpuinfo + " --json": gpuinfoJSON(3000)},
		},
		plugin: &fakeContainer{name: pluginNS + "/limitbed-x7k2p/device-plugin", files: map[string][]byte{
			"/usr/local/vgpu/libvgpu.so":                            libBuild,
			"/usr/local/vgpu/ld.so.preload":                         []byte("/usr/local/vgpu/libvgpu.so\n"),
			"/usr/local/vgpu/containers/" + podUID + "_main.limits": []byte(limitsFile),
		}},
		loginView: gpuinfoJSON(3000),
		metrics: "# HELP hami_container_memory_limit_bytes x\n# TYPE hami_container_memory_limit_bytes gauge\n" +
			`hami_container_memory_limit_bytes{container="main",device_index="0",pod_uid="` + podUID + `"} 3.145728e+09` + "\n" +
			`hami_container_memory_used_bytes{container="main",device_index="0",pod_uid="` + podUID + `"} 1.048576e+09` + "\n" +
			driverMetrics(1300, "yes", 0),
	}
}

// driverMetrics is the monitor's driver-truth accounting of the workload: driverMiB on its GPU
// held by one process (inRegion: whether its usage region lists it), over its limit or not.
func driverMetrics(driverMiB int, inRegion string, over int) string {
	l := `container="main",device_index="0",gpu_uuid="GPU-3c5a",pod_uid="` + podUID + `"`
	return fmt.Sprintf("hami_monitor_driver_last_pass_timestamp_seconds 1.7e+09\nhami_monitor_driver_errors 0\n"+
		"hami_container_driver_memory_bytes{%s} %d\nhami_container_driver_memory_bound_bytes{%s} %d\n"+
		"hami_container_driver_memory_over_limit{%s} %d\n"+
		`hami_driver_process_memory_bytes{container="main",gpu_uuid="GPU-3c5a",in_region="%s",pid="4242",pod_uid="%s"} %d`+"\n",
		l, driverMiB<<20, l, 4024<<20, l, over, inRegion, podUID, driverMiB<<20)
}

func (w *world) doctor() *Doctor {
	fc := &fakeCluster{kube: fake.NewClientset(w.objects...), containers: map[string]*fakeContainer{
		"team/train/main":                          w.workload,
		pluginNS + "/limitbed-x7k2p/device-plugin": w.plugin,
	}, metrics: map[string]string{pluginNS + "/limitbed-x7k2p": w.metrics}}
	return &Doctor{Cluster: fc, PluginNamespace: pluginNS, Login: func(_ context.Context, c ctrexec.Container, cmd string) (launch.Result, error) {
		if w.loginErr != nil {
			return launch.Result{}, w.loginErr
		}
		if cmd != gpuinfo+" --json" {
			return launch.Result{}, fmt.Errorf("login: unexpected command %q", cmd)
		}
		return launch.Result{Method: "su -", Stdout: []byte(w.loginView)}, nil
	}}
}

func (w *world) pod() *corev1.Pod {
	for _, o := range w.objects {
		if p, ok := o.(*corev1.Pod); ok && p.Name == "train" {
			return p
		}
	}
	panic("no workload pod")
}

func (w *world) configMap() *corev1.ConfigMap {
	for _, o := range w.objects {
		if c, ok := o.(*corev1.ConfigMap); ok {
			return c
		}
	}
	panic("no configmap")
}
