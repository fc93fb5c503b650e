package monitor

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/internal/cbuild"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/deviceplugin/fakekubelet"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/gpu/fakenvml"
	"github.com/limitbed/limitbed/plugin/identity"
	"github.com/limitbed/limitbed/plugin/identity/kubesource"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/region"
)

const (
	benchPods = 50
	benchGPUs = 8
)

// BenchmarkAccountingPass is one driver-truth period on a node of 8 GPUs and 50 pods, each with a
// process holding memory on all 8 (400 process rows in the driver's lists), on fakegpu's real
// NVML: the 8 process lists, 50 processes' /proc files, the identity (the API server's pods from
// client-go's fake clientset, the kubelet's pod-resources over gRPC, 50 limits files) and the
// judgement. Every process is in its container's usage region (the steady state of honest pods):
// the regions were read once. cpu-ms/pass is the process's CPU time (user + system, all threads)
// per pass: it includes the fake API server's and the fake kubelet's work, which on a node is
// theirs, so it bounds the monitor's from above. The target is 50 ms.
// Run: go test ./plugin/monitor/ -run '^$' -bench 'BenchmarkAccountingPass' -benchtime 200x
func BenchmarkAccountingPass(b *testing.B) { benchPasses(b, true) }

// BenchmarkAccountingPassUnseen is the same node where no region lists its container's process
// (every process bypasses its library, or every region was replaced): each pass reads the 50
// regions again, the worst case.
func BenchmarkAccountingPassUnseen(b *testing.B) { benchPasses(b, false) }

func benchPasses(b *testing.B, seen bool) {
	a, stop := benchNode(b, seen)
	defer stop()
	ctx := context.Background()
	rep, err := a.Pass(ctx) // warm: NVML, the pod-resources connection's first dial, the caches
	if err != nil {
		b.Fatal(err)
	}
	rows := 0
	for _, u := range rep.Usage {
		rows += len(u.Processes)
		if !u.Judged {
			b.Fatalf("%s on %s not judged: %s", u.Container.Key, u.GPU, u.Why)
		}
	}
	if rows != benchPods*benchGPUs || len(rep.Usage) != benchPods*benchGPUs {
		b.Fatalf("%d process rows in %d container-GPUs, want %d", rows, len(rep.Usage), benchPods*benchGPUs)
	}
	var before, after syscall.Rusage
	b.ResetTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for b.Loop() {
		if _, err := a.Pass(ctx); err != nil {
			b.Fatal(err)
		}
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	b.StopTimer()
	cpu := time.Duration(syscall.TimevalToNsec(after.Utime) - syscall.TimevalToNsec(before.Utime) +
		syscall.TimevalToNsec(after.Stime) - syscall.TimevalToNsec(before.Stime))
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/pass")
}

// benchNode starts the node of BenchmarkAccountingPass and returns its accounting; with seen, each
// region lists its process as live (the test holds its slot's lock byte, as the process would).
func benchNode(b *testing.B, seen bool) (*Accounting, func()) {
	p := cbuild.Build(b)
	dir := b.TempDir()
	profile := filepath.Join(dir, "8x-bench.profile")
	var prof strings.Builder
	prof.WriteString("driver_version = 550.90.07\ncuda_version = 12040\ncontext_mib = 50\n")
	var uuids []string
	for d := range benchGPUs {
		u := fmt.Sprintf("GPU-b0000000-0000-4000-8000-%012d", d)
		uuids = append(uuids, u)
		fmt.Fprintf(&prof, "\ndevice = %d\nname = NVIDIA H200\nuuid = %s\nmemory_mib = 143360\npci_bus_id = 00000000:%02x:00.0\n"+
			"pci_device_id = 0x233510DE\narchitecture = hopper\ncompute_capability = 9.0\nsm_count = 132\n", d, u, 0x10+d)
	}
	if err := os.WriteFile(profile, []byte(prof.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	lib, _ := fakenvml.Setup(b, profile)
	lister := &gpu.ProcessLister{Lib: lib}
	if err := lister.Init(); err != nil {
		b.Fatal(err)
	}
	// The pods, their limits files and regions, and a process of each holding 100 MiB on every GPU.
	containers := filepath.Join(dir, "containers")
	proc := filepath.Join(dir, "proc")
	pr, err := fakekubelet.StartPodResources(filepath.Join(fakekubelet.ShortTempDir(b), "pr.sock"))
	if err != nil {
		b.Fatal(err)
	}
	var objects []runtime.Object
	var cmds []*exec.Cmd
	stop := func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		pr.Stop()
		lister.Shutdown()
	}
	limits := "HAMI_LIMITS_FORMAT=1\n"
	spec := region.LimitbedSpec{Limits: map[int]uint64{}}
	for d := range benchGPUs {
		limits += fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT_%d=10000m\n", d)
		spec.Limits[d] = 10000 << 20
	}
	for i := range benchPods {
		uid := fmt.Sprintf("%08d-0000-4000-8000-000000000000", i)
		cid := fmt.Sprintf("%064d", i+1)
		name := fmt.Sprintf("pod-%02d", i)
		c := exec.Command(filepath.Join(p.Bin, "cudaprobe"), "--mib", "100", "--spread", strconv.Itoa(benchGPUs), "--hold-until-signal")
		c.Env = append(os.Environ(), "LD_LIBRARY_PATH="+p.Lib)
		out, err := c.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		cmds = append(cmds, c)
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.Contains(line, `"granted_mib":100`) {
			stop()
			b.Fatalf("process %d: %q %v", i, line, err)
		}
		mirrorProc(b, proc, c.Process.Pid, "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"+
			strings.ReplaceAll(uid, "-", "_")+".slice/cri-containerd-"+cid+".scope\n")
		key := uid + "_main"
		if err := os.MkdirAll(filepath.Join(containers, key), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(containers, key+".limits"), []byte(limits), 0o644); err != nil {
			b.Fatal(err)
		}
		s := spec
		s.Slots = []region.LimitbedSpecSlot{{Active: true, PID: int32(c.Process.Pid)}}
		if err := os.WriteFile(filepath.Join(containers, key, paths.UsageCacheName), s.Bytes(), 0o644); err != nil {
			b.Fatal(err)
		}
		if seen {
			holdSlotLocks(b, filepath.Join(containers, key, paths.UsageCacheName), 1)
		}
		var placed []string
		var ids []string
		for d, u := range uuids {
			ids = append(ids, identity.DeviceID(u, uint(i%10)))
			placed = append(placed, fmt.Sprintf("%s,NVIDIA,10000,0:", uuids[(d+1)%benchGPUs]))
		}
		pr.Assign("team", name, "main", identity.DefaultResourceName, ids)
		objects = append(objects, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, UID: types.UID(uid),
				Annotations: map[string]string{"hami.io/vgpu-devices-allocated": strings.Join(placed, "") + ";"}},
			Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "main", ContainerID: "containerd://" + cid}}},
		})
	}
	src := &identity.Sources{Pods: &kubesource.APIServer{Kube: fake.NewClientset(objects...), NodeName: "n1"},
		Devices: &kubesource.Kubelet{Socket: pr.Socket}, ContainersDir: containers}
	a := &Accounting{Driver: lister, Identity: src, Dir: containers, ProcRoot: proc, ContextAllowance: DefaultContextAllowance,
		Enforcement: v1.EnforcementReport, Logger: klog.Background()}
	return a, stop
}
