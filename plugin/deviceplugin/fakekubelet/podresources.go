package fakekubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"

	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodResources serves the kubelet's pod-resources API (v1 List) on a unix
// socket, as /var/lib/kubelet/pod-resources/kubelet.sock: which devices of
// which resource each container of each pod holds. The harness records what
// its fake kubelet allocated (Assign), as the kubelet checkpoints it.
type PodResources struct {
	podresourcesapi.UnimplementedPodResourcesListerServer

	Socket string

	mu   sync.Mutex
	pods []*podresourcesapi.PodResources
	srv  *grpc.Server
}

// StartPodResources serves the API at socket.
func StartPodResources(socket string) (*PodResources, error) {
	if len(socket) > maxSocketPath {
		return nil, fmt.Errorf("fake kubelet: socket path %s is %d bytes, unix sockets allow %d", socket, len(socket), maxSocketPath)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("fake kubelet: %w", err)
	}
	lis, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("fake kubelet: listen on %s: %w", socket, err)
	}
	p := &PodResources{Socket: socket, srv: grpc.NewServer()}
	podresourcesapi.RegisterPodResourcesListerServer(p.srv, p)
	go func() { _ = p.srv.Serve(lis) }()
	return p, nil
}

// Assign records that container of pod namespace/name holds ids of resource.
func (p *PodResources) Assign(namespace, name, container, resource string, ids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.IndexFunc(p.pods, func(r *podresourcesapi.PodResources) bool { return r.Namespace == namespace && r.Name == name })
	if i < 0 {
		p.pods = append(p.pods, &podresourcesapi.PodResources{Namespace: namespace, Name: name})
		i = len(p.pods) - 1
	}
	pod := p.pods[i]
	pod.Containers = append(pod.Containers, &podresourcesapi.ContainerResources{Name: container,
		Devices: []*podresourcesapi.ContainerDevices{{ResourceName: resource, DeviceIds: slices.Clone(ids)}}})
}

// Forget removes pod namespace/name (it was deleted).
func (p *PodResources) Forget(namespace, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods = slices.DeleteFunc(p.pods, func(r *podresourcesapi.PodResources) bool { return r.Namespace == namespace && r.Name == name })
}

// List implements the pod-resources API.
func (p *PodResources) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := &podresourcesapi.ListPodResourcesResponse{}
	for _, pod := range p.pods {
		out.PodResources = append(out.PodResources, clonePod(pod))
	}
	return out, nil
}

func clonePod(in *podresourcesapi.PodResources) *podresourcesapi.PodResources {
	out := &podresourcesapi.PodResources{Namespace: in.Namespace, Name: in.Name}
	for _, c := range in.Containers {
		cc := &podresourcesapi.ContainerResources{Name: c.Name}
		for _, d := range c.Devices {
			cc.Devices = append(cc.Devices, &podresourcesapi.ContainerDevices{ResourceName: d.ResourceName, DeviceIds: slices.Clone(d.DeviceIds)})
		}
		out.Containers = append(out.Containers, cc)
	}
	return out
}

// Stop stops serving and removes the socket.
func (p *PodResources) Stop() {
	p.srv.Stop()
	_ = os.Remove(p.Socket)
}
