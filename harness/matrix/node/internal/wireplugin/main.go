// Command wireplugin is a test device plugin that speaks to the kubelet and the API server exactly
// as HAMi's NVIDIA device plugin does, with none of its GPU work, so that the harness's DaemonSet
// namespace, fake kubelet and fake API server are tested against that protocol in `make test`:
//
//   - it serves its socket in the kubelet's fixed /var/lib/kubelet/device-plugins directory and
//     registers through /var/lib/kubelet/device-plugins/kubelet.sock (no flag moves either);
//   - it patches the node's hami.io/node-nvidia-register annotation with its devices (JSON);
//   - on Allocate it finds the pod by the node's hami.io/mutex.lock (else among the node's pending
//     pods with bind-phase allocating), pops the container's entry of
//     hami.io/vgpu-devices-to-allocate and writes the rest back, sets hami.io/bind-phase=success (or
//     failed) and releases the node lock with the resourceVersion it read.
//
// It prints "socket PATH" once serving and "registered" after the kubelet accepted it. Environment:
// NODE_NAME, KUBECONFIG.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/annotations"
	"github.com/limitbed/limitbed/plugin/libvars"
)

const socketName = "limitbed-wire.sock"

func main() {
	resource := flag.String("resource", "nvidia.com/gpu", "resource name to register")
	gpus := flag.Int("gpus", 1, "GPUs to advertise")
	split := flag.Int("split", 10, "devices per GPU")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, *resource, *gpus, *split); err != nil {
		fmt.Fprintln(os.Stderr, "wireplugin:", err)
		os.Exit(1)
	}
}

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	kube    kubernetes.Interface
	node    string
	devices []*pluginapi.Device
	mu      sync.Mutex // Allocate calls are serialized, as HAMi's are
}

func run(ctx context.Context, resource string, gpus, split int) error {
	node := os.Getenv("NODE_NAME")
	if node == "" {
		return errors.New("NODE_NAME is not set")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	p := &plugin{kube: kube, node: node}
	var reg []map[string]any
	for g := range gpus {
		uuid := fmt.Sprintf("GPU-wire-%04d", g)
		for i := range split {
			p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("%s-%d", uuid, i), Health: pluginapi.Healthy})
		}
		reg = append(reg, map[string]any{"id": uuid, "index": g, "count": split, "devmem": 16384, "devcore": 100,
			"type": "NVIDIA-wire", "health": true})
	}
	if err := p.register(ctx, reg); err != nil {
		return err
	}

	sock := filepath.Join(pluginapi.DevicePluginPath, socketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	fmt.Println("socket", sock)

	conn, err := grpc.NewClient("unix://"+pluginapi.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial kubelet: %w", err)
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: socketName, ResourceName: resource,
	}, grpc.WaitForReady(true)); err != nil {
		return fmt.Errorf("register with the kubelet at %s: %w", pluginapi.KubeletSocket, err)
	}
	fmt.Println("registered")
	<-ctx.Done()
	return nil
}

// register patches the node's device annotation, as HAMi's WatchAndRegister does.
func (p *plugin) register(ctx context.Context, devs []map[string]any) error {
	val, err := json.Marshal(devs)
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{annotations.NodeRegister: string(val)}}})
	if err != nil {
		return err
	}
	if _, err := p.kube.CoreV1().Nodes().Patch(ctx, p.node, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch node %s: %w", p.node, err)
	}
	return nil
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (p *plugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod, err := p.pendingPod(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := p.allocate(ctx, pod, req)
	if err != nil {
		p.finish(ctx, pod, annotations.PhaseFailed)
		return nil, err
	}
	return resp, nil
}

func (p *plugin) allocate(ctx context.Context, pod *corev1.Pod, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	devs, err := annotations.DecodePodDevices(pod.Annotations[annotations.DevicesToAllocate])
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	resp := &pluginapi.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		idx, cdevs, ok := devs.Next()
		if !ok || len(cdevs) != len(creq.DevicesIds) {
			return nil, fmt.Errorf("pod %s/%s: device number not matched", pod.Namespace, pod.Name)
		}
		devs = devs.Erase(idx)
		envs := map[string]string{"NVIDIA_VISIBLE_DEVICES": cdevs[0].UUID}
		for i, d := range cdevs {
			envs[libvars.MemoryLimitOf(i)] = fmt.Sprintf("%dm", d.UsedMem)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{Envs: envs})
	}
	if err := p.patchPod(ctx, pod, map[string]string{annotations.DevicesToAllocate: devs.Encode()}); err != nil {
		return nil, err
	}
	cur, err := p.kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if !strings.Contains(cur.Annotations[annotations.DevicesToAllocate], "NVIDIA") {
		p.finish(ctx, cur, annotations.PhaseSuccess)
	}
	return resp, nil
}

// pendingPod is the pod the node lock names, else the node's pending pod being allocated.
func (p *plugin) pendingPod(ctx context.Context) (*corev1.Pod, error) {
	n, err := p.kube.CoreV1().Nodes().Get(ctx, p.node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", p.node, err)
	}
	if h, err := annotations.ParseNodeLock(n.Annotations[annotations.NodeLock]); err == nil && h.Name != "" {
		return p.kube.CoreV1().Pods(h.Namespace).Get(ctx, h.Name, metav1.GetOptions{})
	}
	list, err := p.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + p.node})
	if err != nil {
		return nil, fmt.Errorf("list pods of %s: %w", p.node, err)
	}
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.Status.Phase == corev1.PodPending && pod.Annotations[annotations.BindPhase] == string(annotations.PhaseAllocating) &&
			pod.Annotations[annotations.VGPUNode] == p.node {
			return pod, nil
		}
	}
	return nil, fmt.Errorf("no binding pod found on node %s", p.node)
}

// finish sets the pod's bind-phase and releases the node lock it holds.
func (p *plugin) finish(ctx context.Context, pod *corev1.Pod, phase annotations.Phase) {
	if err := p.patchPod(ctx, pod, map[string]string{annotations.BindPhase: string(phase)}); err != nil {
		fmt.Fprintln(os.Stderr, "wireplugin:", err)
	}
	for range 5 {
		n, err := p.kube.CoreV1().Nodes().Get(ctx, p.node, metav1.GetOptions{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "wireplugin: release lock:", err)
			return
		}
		v := n.Annotations[annotations.NodeLock]
		if h, err := annotations.ParseNodeLock(v); err != nil || !h.Names(pod.Namespace, pod.Name) {
			return
		}
		body := fmt.Sprintf(`{"metadata":{"annotations":{%q:null},"resourceVersion":%q}}`, annotations.NodeLock, n.ResourceVersion)
		_, err = p.kube.CoreV1().Nodes().Patch(ctx, p.node, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		if err == nil {
			fmt.Println("released", v)
			return
		}
		if !apierrors.IsConflict(err) {
			fmt.Fprintln(os.Stderr, "wireplugin: release lock:", err)
			return
		}
	}
}

func (p *plugin) patchPod(ctx context.Context, pod *corev1.Pod, ann map[string]string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	if _, err := p.kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
