package deviceplugin

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/allocate"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/delivery"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/pods"
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

// Allocate classifies kubelet's device IDs with the plugin's device table,
// finds the allocating pod whose next container entries hold those GPUs
// (see matchPod), hands each container request its entry and builds the
// response. Any failure after the pod is found marks it bind-phase=failed.
func (p *Plugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.allocMu.Lock()
	defer p.allocMu.Unlock()

	reqs, err := p.classify(req.ContainerRequests)
	if err != nil {
		return nil, fmt.Errorf("allocate: %w", err)
	}
	cands, err := p.opts.Pods.PendingPods(ctx)
	if err != nil {
		return nil, fmt.Errorf("allocate: %w", err)
	}
	m, only, err := matchPod(cands, reqs, p.opts.Allocator.MIGMode())
	if err != nil {
		err = fmt.Errorf("allocate: %w", err)
		if only != nil {
			if merr := p.opts.Pods.MarkFailed(ctx, only); merr != nil {
				err = errors.Join(err, merr)
			}
			p.log.Error(err, "Allocation failed; pod marked bind-phase=failed", "pod", klog.KObj(only))
		}
		return nil, err
	}
	pod, podDevs := m.pod, m.devs
	log := p.log.WithValues("pod", klog.KObj(pod))
	fail := func(err error) (*pluginapi.AllocateResponse, error) {
		if merr := p.opts.Pods.MarkFailed(ctx, pod); merr != nil {
			err = errors.Join(err, merr)
		}
		log.Error(err, "Allocation failed; pod marked bind-phase=failed")
		return nil, err
	}

	// HAMi v2.10 knew no limitDelivery: its profile neither reads nor
	// rejects the annotation.
	decision := delivery.Decision{Mode: v1.LimitDeliveryEnv, Source: delivery.SourceDefault}
	if p.opts.Allocator.Profile() != allocate.ProfileHAMiV210 {
		decision, err = delivery.Resolve(pod, p.opts.Delivery)
		if err != nil {
			return fail(err)
		}
		delivery.ReportIgnored(log, p.opts.Recorder, pod, decision)
	}

	resp := &pluginapi.AllocateResponse{}
	consumed := false
	for _, cr := range reqs {
		if cr.mig {
			r, err := p.opts.Allocator.Allocate(allocate.Request{Pod: pod, DeviceIDs: cr.ids, MIG: true})
			if err != nil {
				return fail(err)
			}
			resp.ContainerResponses = append(resp.ContainerResponses, r)
			continue
		}
		// matchPod checked that this entry holds kubelet's GPUs.
		idx, devs, _ := podDevs.Next()
		ctr, err := pods.ContainerAt(pod, idx)
		if err != nil {
			return fail(err)
		}
		r, err := p.opts.Allocator.Allocate(allocate.Request{
			Pod: pod, Container: ctr, Devices: devs, DeviceIDs: cr.ids, Delivery: decision.Mode,
		})
		if err != nil {
			return fail(err)
		}
		podDevs = podDevs.Erase(idx)
		consumed = true
		resp.ContainerResponses = append(resp.ContainerResponses, r)
		log.Info("Allocated", "container", ctr.Name, "devices", cr.ids,
			"limitDelivery", decision.Mode, "limitDeliverySource", decision.Source)
	}
	if consumed {
		if err := p.opts.Pods.SetDevicesToAllocate(ctx, pod, podDevs); err != nil {
			return fail(err)
		}
	}
	if err := p.opts.Pods.MarkSuccessIfDone(ctx, pod); err != nil {
		return fail(err)
	}
	return resp, nil
}
