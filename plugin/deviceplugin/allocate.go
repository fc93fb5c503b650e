package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/allocate"
	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/delivery"
	"github.com/limitbed/limitbed/plugin/podrequest"
	"github.com/limitbed/limitbed/plugin/pods"
)

// Event reasons the plugin records on pods.
const (
	// ReasonPlacementRefused: the pod's placement is not one the plugin
	// accepts (docs/trust-model.md), or the pod may be behind a call while
	// it has none.
	ReasonPlacementRefused = "PlacementRefused"
	// ReasonAllocationFailed: the placement was accepted, but the node could
	// not deliver it (e.g. the limits file could not be written).
	ReasonAllocationFailed = "AllocationFailed"
)

// DefaultAPITimeout bounds one Allocate call, every API request included:
// the kubelet waits for Allocate without a deadline of its own.
const DefaultAPITimeout = 10 * time.Second

// Allocate hands the kubelet's call the placement of the pod the scheduler's
// node lock names, after holding it to the kubelet's devices and to the
// pod's own requests (see docs/trust-model.md). It takes no lock across API
// calls and ends within the API timeout; a transient failure (the API server
// slow, a concurrent change) leaves the pod as it was, so the kubelet's retry
// can succeed, while a refusal marks the pod failed with an Event saying why.
func (p *Plugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, p.apiTimeout())
	defer cancel()
	reqs, err := p.classify(req.ContainerRequests)
	if err != nil {
		return nil, fmt.Errorf("allocate: %w", err)
	}
	if p.opts.Allocator.MIGMode() {
		for _, r := range reqs {
			if !r.mig {
				return nil, fmt.Errorf("allocate: operatingmode mig: kubelet's devices %v are full GPUs (%v), not a MIG device; no HAMi-core limit is delivered in MIG mode, so they are refused", r.ids, r.uuids)
			}
		}
	}
	for {
		resp, err := p.allocateOnce(ctx, reqs)
		// Another call changed the pod first: read it again, after a short
		// random pause so racing calls spread out, until the call's deadline.
		if errors.Is(err, pods.ErrConflict) && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(1+rand.IntN(10)) * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("allocate: %w", err)
		}
		return resp, nil
	}
}

func (p *Plugin) apiTimeout() time.Duration {
	if p.opts.APITimeout > 0 {
		return p.opts.APITimeout
	}
	return DefaultAPITimeout
}

// allocateOnce reads the placement, checks it, performs the host side effects
// and claims the entries. Its API errors are transient (nothing is marked).
func (p *Plugin) allocateOnce(ctx context.Context, reqs []request) (*pluginapi.AllocateResponse, error) {
	pl, err := p.opts.Pods.Placement(ctx, p.opts.ResourceName)
	if err != nil {
		return nil, err
	}
	if cs := p.unrefused(pl.Contenders); len(cs) > 0 {
		return nil, p.refuseContenders(ctx, cs, pl.Pod)
	}
	if resp, ok, err := p.answers.retry(reqs, pl, p.log); ok {
		if err != nil {
			p.log.Error(err, "Allocation refused")
		}
		return resp, err
	}
	if pl.Pod == nil {
		if err := p.opts.Pods.ReleaseLockIfDone(ctx); err != nil {
			p.log.Error(err, "Releasing a node lock left by a finished pod")
		}
		return nil, pl.Refusal
	}
	pod := pl.Pod
	log := p.log.WithValues("pod", klog.KObj(pod))

	plan, decision, err := p.plan(pod, reqs)
	if err != nil {
		return nil, p.refuse(ctx, log, pod, ReasonPlacementRefused, err)
	}

	resp := &pluginapi.AllocateResponse{}
	p.filesMu.Lock() // host side effects only: never held across an API call
	for _, s := range plan.steps {
		r, err := p.opts.Allocator.Allocate(s.req)
		if err != nil {
			p.filesMu.Unlock()
			return nil, p.refuse(ctx, log, pod, ReasonAllocationFailed, err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	p.filesMu.Unlock()

	if plan.consumed {
		if err := p.opts.Pods.Claim(ctx, pod, plan.left); err != nil {
			return nil, err
		}
		p.answers.remember(pod, plan.steps, resp) // a kubelet that did not receive it asks again
		if !plan.left.Pending() {
			if err := p.opts.Pods.ReleaseLockIfDone(ctx); err != nil {
				// The allocation stands; the next call retries the release.
				log.Error(err, "Releasing the node lock after the last container")
			}
		}
	}
	// Reported once the call stands (a call read again after a conflict
	// would report it twice).
	delivery.ReportIgnored(log, p.opts.Recorder, pod, decision)
	for _, s := range plan.steps {
		if s.req.Container != nil {
			log.Info("Allocated", "container", s.req.Container.Name, "devices", s.req.DeviceIDs,
				"limitDelivery", decision.Mode, "limitDeliverySource", decision.Source)
		}
	}
	return resp, nil
}

// plan is what a call hands out: one allocation per container request, and
// the pod's entries left afterwards.
type plan struct {
	steps    []step
	left     annotations.PodDevices
	consumed bool
}

type step struct{ req allocate.Request }

// plan checks pod's placement against the kubelet's requests and the pod's
// own resource requests, without side effects. Its error is a refusal.
func (p *Plugin) plan(pod *corev1.Pod, reqs []request) (plan, delivery.Decision, error) {
	var pl plan
	// HAMi v2.10 knew no limitDelivery: its profile neither reads nor
	// rejects the annotation.
	decision := delivery.Decision{Mode: v1.LimitDeliveryEnv, Source: delivery.SourceDefault}
	if p.opts.Allocator.Profile() != allocate.ProfileHAMiV210 {
		var err error
		if decision, err = delivery.Resolve(pod, p.opts.Delivery); err != nil {
			return pl, decision, err
		}
	}
	devs, err := annotations.DecodePodDevices(pod.Annotations[annotations.DevicesToAllocate])
	if err != nil {
		return pl, decision, err
	}
	for _, cr := range reqs {
		if cr.mig {
			// MIG devices are the kubelet's own, one to one: the device is
			// the kubelet's choice, named from the device table.
			pl.steps = append(pl.steps, step{allocate.Request{Pod: pod, DeviceIDs: cr.ids, UUIDs: cr.uuids, MIG: true}})
			continue
		}
		idx, entry, ok := devs.Next()
		if !ok {
			return pl, decision, fmt.Errorf("kubelet asked for %v (%v), but pod %s/%s has no container entry left in %s",
				cr.ids, cr.uuids, pod.Namespace, pod.Name, annotations.DevicesToAllocate)
		}
		if why := entryMatches(entry, cr); why != "" {
			return pl, decision, fmt.Errorf("pod %s/%s: %s", pod.Namespace, pod.Name, why)
		}
		ctr, err := pods.ContainerAt(pod, idx)
		if err != nil {
			return pl, decision, err
		}
		if err := podrequest.Check(ctr, entry, p.requests(), p.capacity); err != nil {
			return pl, decision, fmt.Errorf("pod %s/%s: %w; a placement must stay within the pod's own requests", pod.Namespace, pod.Name, err)
		}
		pl.steps = append(pl.steps, step{allocate.Request{
			Pod: pod, Container: ctr, Devices: entry, DeviceIDs: cr.ids, UUIDs: cr.uuids, Delivery: decision.Mode,
		}})
		devs = devs.Erase(idx)
		pl.consumed = true
	}
	pl.left = devs
	return pl, decision, nil
}

// requests is how the plugin reads containers' requests; the resource is the
// one the plugin advertises.
func (p *Plugin) requests() v1.Requests {
	r := p.opts.Requests
	if r.CountName == "" {
		r = v1.Resolve(nil, nil, "").Requests
		r.CountName = p.opts.ResourceName
	}
	return r
}

// refuse records why pod's placement is refused (an Event and the log),
// marks it failed and releases its lock; it returns err with any failure of
// those.
func (p *Plugin) refuse(ctx context.Context, log klog.Logger, pod *corev1.Pod, reason string, err error) error {
	p.event(pod, reason, err.Error())
	if merr := p.opts.Pods.MarkFailed(ctx, pod); merr != nil {
		err = errors.Join(err, merr)
	}
	log.Error(err, "Allocation refused; pod marked bind-phase=failed", "reason", reason)
	return err
}

// refuseContenders refuses a call that may belong to a pod without an
// accepted placement: each such pod gets an Event and bind-phase=failed (its
// one Allocate is this or a later one; either way it gets nothing), and the
// scheduler's pod keeps its placement for its own call.
func (p *Plugin) refuseContenders(ctx context.Context, cs []pods.Contender, locked *corev1.Pod) error {
	var names []string
	var errs []error
	for _, c := range cs {
		p.remember(c.Pod)
		msg := fmt.Sprintf("refused: the kubelet may be admitting this pod, which has %s; only the pod the scheduler's %s names is allocated", c.Why, annotations.NodeLock)
		p.event(c.Pod, ReasonPlacementRefused, msg)
		if err := p.opts.Pods.MarkFailed(ctx, c.Pod); err != nil {
			errs = append(errs, err)
		}
		names = append(names, fmt.Sprintf("pod %s/%s (%s)", c.Pod.Namespace, c.Pod.Name, c.Why))
	}
	err := fmt.Errorf("refused: this call may be for %s, which the scheduler did not place; it gets nothing", strings.Join(names, ", "))
	if locked != nil {
		err = fmt.Errorf("%w; pod %s/%s keeps its placement for its own call", err, locked.Namespace, locked.Name)
	}
	err = errors.Join(append([]error{err}, errs...)...)
	p.log.Error(err, "Allocation refused")
	return err
}

func (p *Plugin) event(pod *corev1.Pod, reason, msg string) {
	if p.opts.Recorder != nil {
		p.opts.Recorder.Eventf(pod, corev1.EventTypeWarning, reason, "%s", msg)
	}
}
