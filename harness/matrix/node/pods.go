package node

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/harness/scheduler"
	"github.com/limitbed/limitbed/plugin/annotations"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/paths"
)

// PodSpec is what a scenario asks for: one container with one vGPU.
type PodSpec struct {
	Name   string
	GPUMem int32 // nvidia.com/gpumem in MiB
	Cores  int32 // nvidia.com/gpucores in percent; 0: no core limit
	// Annotations are added to (and override) the scheduler's, e.g. hami.io/limit-delivery.
	Annotations map[string]string
	// Env is the container spec's own environment (e.g. CUDA_DISABLE_CONTROL=true).
	Env map[string]string
}

// Pod is an allocated pod: its one container's Allocate response and where its files are.
type Pod struct {
	Name      string
	UID       string
	Container string // the container's name
	DeviceIDs []string
	Resp      *pluginapi.ContainerAllocateResponse
	SpecEnv   map[string]string
	// CacheDir is the host side of /usr/local/vgpu; LimitsFile the host side of /overrideEnv.
	CacheDir   string
	LimitsFile string
}

// ContainerName is the name every pod's single container gets.
const ContainerName = "main"

// Allocate creates the pod in the API server (pending, on this node) and places it as HAMi's
// scheduler does (harness/scheduler: node lock, hami.io/vgpu-devices-to-allocate, hami.io/vgpu-node,
// hami.io/bind-phase=allocating, hami.io/bind-time), then asks the plugin for its container's
// devices over the kubelet API, as the kubelet does when it starts the pod. It returns the response
// (host paths as the node has them) or the plugin's error.
func (n *Node) Allocate(ctx context.Context, spec PodSpec) (*Pod, error) {
	n.mu.Lock()
	n.seq++
	uid := fmt.Sprintf("%08x-0000-4000-8000-%012d", time.Now().UnixNano()&0xffffffff, n.seq)
	ids, gpuUUID, err := n.pickDevice()
	n.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", spec.Name, err)
	}
	devs := annotations.PodDevices{{{UUID: gpuUUID, Type: "NVIDIA", UsedMem: spec.GPUMem, UsedCores: spec.Cores}}}
	envNames := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		envNames = append(envNames, k)
	}
	sort.Strings(envNames)
	var env []corev1.EnvVar
	for _, k := range envNames {
		env = append(env, corev1.EnvVar{Name: k, Value: spec.Env[k]})
	}
	// The pod asks for what the scheduler places (HAMi's resource names): the plugin holds a
	// placement to the pod's own requests.
	limits := corev1.ResourceList{ResourceName: resource.MustParse("1"),
		"nvidia.com/gpumem": *resource.NewQuantity(int64(spec.GPUMem), resource.DecimalSI)}
	if spec.Cores > 0 {
		limits["nvidia.com/gpucores"] = *resource.NewQuantity(int64(spec.Cores), resource.DecimalSI)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: "default", UID: types.UID(uid), Annotations: maps.Clone(spec.Annotations)},
		Spec: corev1.PodSpec{NodeName: Name, Containers: []corev1.Container{{
			Name: ContainerName, Image: "limitbed/workload:dev", Env: env,
			Resources: corev1.ResourceRequirements{Limits: limits},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if _, err := n.kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("pod %s: create in the API server: %w", spec.Name, err)
	}
	if err := scheduler.Bind(ctx, n.kube, pod, Name, devs, scheduler.Options{NoBinding: true}); err != nil {
		return nil, fmt.Errorf("pod %s: %w", spec.Name, err)
	}
	if len(spec.Annotations) > 0 {
		// the spec's annotations override the scheduler's (tests of a bad placement)
		if err := n.patchAnnotations(ctx, spec.Name, spec.Annotations); err != nil {
			return nil, fmt.Errorf("pod %s: %w", spec.Name, err)
		}
	}
	resp, err := n.client.AllocateOne(ctx, ids...)
	if err != nil {
		return nil, fmt.Errorf("pod %s: kubelet Allocate %v: %w", spec.Name, ids, err)
	}
	if n.ds != nil {
		n.ds.translate(resp)
	}
	n.mu.Lock()
	for _, id := range ids {
		n.used[id] = true
	}
	n.mu.Unlock()
	n.podRes.Assign("default", spec.Name, ContainerName, ResourceName, ids) // the kubelet checkpoints it
	key := uid + "_" + ContainerName
	p := &Pod{
		Name: spec.Name, UID: uid, Container: ContainerName, DeviceIDs: ids, Resp: resp, SpecEnv: maps.Clone(spec.Env),
		CacheDir:   filepath.Join(paths.ContainersDir(n.HookPath), key),
		LimitsFile: filepath.Join(paths.ContainersDir(n.HookPath), key+limitsfile.Suffix),
	}
	n.mu.Lock()
	n.pods[spec.Name] = p
	n.mu.Unlock()
	return p, nil
}

// pickDevice returns the next free advertised device ID and its GPU (MIG) UUID. Caller holds mu.
func (n *Node) pickDevice() ([]string, string, error) {
	for _, id := range n.devices {
		if n.used[id] {
			continue
		}
		if strings.HasPrefix(id, "MIG-") {
			return []string{id}, id, nil
		}
		i := strings.LastIndex(id, "-")
		return []string{id}, id[:i], nil
	}
	return nil, "", fmt.Errorf("no free device among %d advertised", len(n.devices))
}

func (n *Node) setDevices(devs []*pluginapi.Device) {
	ids := make([]string, 0, len(devs))
	for _, d := range devs {
		if d.Health == pluginapi.Healthy {
			ids = append(ids, d.ID)
		}
	}
	n.mu.Lock()
	n.devices = ids
	n.mu.Unlock()
}

// PodAnnotation returns an annotation of pod name as the API server has it now.
func (n *Node) PodAnnotation(ctx context.Context, name, key string) (string, error) {
	p, err := n.kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("get pod %s: %w", name, err)
	}
	return p.Annotations[key], nil
}

// DeletePod removes the pod from the API server (its host files stay for the monitor to collect).
func (n *Node) DeletePod(ctx context.Context, name string) error {
	if err := n.kube.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete pod %s: %w", name, err)
	}
	n.podRes.Forget("default", name)
	n.mu.Lock()
	if p := n.pods[name]; p != nil {
		for _, id := range p.DeviceIDs {
			delete(n.used, id)
		}
	}
	delete(n.pods, name)
	n.mu.Unlock()
	return nil
}

func (n *Node) patchAnnotations(ctx context.Context, name string, ann map[string]string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	if _, err := n.kube.CoreV1().Pods("default").Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotate: %w", err)
	}
	return nil
}

// NodeLock returns the node's hami.io/mutex.lock annotation as the API server has it now ("" when
// free).
func (n *Node) NodeLock(ctx context.Context) (string, error) {
	node, err := n.kube.CoreV1().Nodes().Get(ctx, Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("get node %s: %w", Name, err)
	}
	return node.Annotations[annotations.NodeLock], nil
}
