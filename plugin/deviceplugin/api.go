package deviceplugin

import (
	"context"
	"fmt"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/gpu"
)

// GetDevicePluginOptions implements the device-plugin API.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.options(), nil
}

// ListAndWatch sends the device list, then again after every health change.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	changed := make(chan struct{}, 1)
	p.mu.Lock()
	p.watchers[changed] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.watchers, changed)
		p.mu.Unlock()
	}()
	for {
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.snapshot()}); err != nil {
			return fmt.Errorf("send device list: %w", err)
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		}
	}
}

func (p *Plugin) snapshot() []*pluginapi.Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*pluginapi.Device, len(p.devices))
	for i, d := range p.devices {
		out[i] = &pluginapi.Device{ID: d.ID, Health: d.Health, Topology: d.Topology}
	}
	return out
}

// markUnhealthy flags every device of the GPU uuid (its split devices, or
// its MIG devices) and wakes all watchers.
func (p *Plugin) markUnhealthy(uuid string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.devices {
		if p.board[d.ID] == uuid {
			d.Health = pluginapi.Unhealthy
		}
	}
	for ch := range p.watchers {
		select {
		case ch <- struct{}{}:
		default: // a send is already pending; it will pick up this change
		}
	}
}

func (p *Plugin) watchHealth(ctx context.Context, devs []gpu.Device) {
	ch := make(chan string)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case u := <-ch:
				p.log.Info("GPU unhealthy", "device", u)
				p.markUnhealthy(u)
			}
		}
	}()
	w := &gpu.HealthWatcher{Lib: p.opts.HealthLib, PollInterval: p.opts.HealthPollInterval}
	if err := w.Watch(ctx, boards(devs), ch); err != nil {
		p.log.Error(err, "Health watch ended; devices stay as they are")
	}
}

// GetPreferredAllocation implements the device-plugin API.
func (p *Plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	p.mu.Lock()
	physical := p.physical
	p.mu.Unlock()
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.ContainerRequests {
		ids := preferred(cr.AvailableDeviceIDs, cr.MustIncludeDeviceIDs, int(cr.AllocationSize), physical)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// PreStartContainer implements the device-plugin API; nothing to do.
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
