package main

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/identity"
	"github.com/limitbed/limitbed/plugin/identity/kubesource"
	kubeclient "github.com/limitbed/limitbed/plugin/internal/kube"
	"github.com/limitbed/limitbed/plugin/monitor"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/schedproto"
)

// serve sweeps every o.interval, decides the compute policy, runs the
// driver-truth accounting and serves /metrics until ctx ends.
// monitorAPITimeout bounds each API server request of the monitor (identity
// lookups, Events): a silent API server delays a pass, never stalls it.
const monitorAPITimeout = 10 * time.Second

func serve(ctx context.Context, o options) error {
	logger := klog.FromContext(ctx)
	eff, err := v1.LoadEffective(o.deviceConfigFile, o.nodeConfigFile, o.nodeName, logger)
	if err != nil {
		return err
	}
	kube, err := kubeclient.Client(o.kubeconfig, monitorAPITimeout)
	if err != nil {
		return err
	}
	dir := paths.ContainersDir(o.hookPath)
	// One identity snapshot per period, shared by the compute policy and the accounting.
	src := &identity.Sources{Pods: &kubesource.APIServer{Kube: kube, NodeName: o.nodeName}, ResourceName: eff.ResourceCountName, ContainersDir: dir}
	if o.podResources != "" {
		src.Devices = &kubesource.Kubelet{Socket: o.podResources}
	}
	ids := &identity.Cached{Source: src, MaxAge: shortestPeriod(o.feedback, o.accounting) / 2}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&monitor.Collector{Dir: dir, Usage: monitor.RegionFiles{}, Logger: logger, ScrapeTimeout: o.scrapeTimeout})
	s := &monitor.Sweeper{
		Dir: dir, API: &monitor.APIPods{Kube: kube, NodeName: o.nodeName}, Grace: o.grace, Logger: logger,
		OnRemove: monitor.SweepMetrics(reg),
	}
	if o.podResources != "" {
		s.Kubelet = &monitor.KubeletPods{Socket: o.podResources}
	}
	if o.metricsAddress != "" {
		srv := &http.Server{Addr: o.metricsAddress, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "Metrics server stopped")
			}
		}()
		defer srv.Shutdown(context.Background())
	}
	if o.feedback > 0 {
		f := &monitor.Feedback{Dir: dir, Identity: ids, Hold: 2 * o.feedback, Timeout: o.scrapeTimeout, Logger: logger.WithName("compute-policy")}
		go f.Run(ctx, o.feedback)
	}
	if o.accounting > 0 {
		lib := gpu.NewLibrary(o.nvmlLibrary)
		nv := &lazyNVML{l: gpu.ProcessLister{Lib: lib}, b: gpu.BusySampler{Lib: lib}}
		defer nv.shutdown()
		a := &monitor.Accounting{Driver: nv, Identity: ids, Dir: dir, ContextAllowance: o.allowance.bytes, Enforcement: eff.Enforcement,
			Events: kubeclient.EventRecorder(ctx, kube, "vgpu-monitor"), RegionTimeout: o.scrapeTimeout, Logger: logger.WithName("driver-truth"),
			Busy: nv, GrantDir: schedproto.GrantDir(o.hookPath), ComputeMargin: o.computeMargin}
		reg.MustRegister(&monitor.DriverCollector{Accounting: a}, &monitor.ComputeCollector{Accounting: a})
		go a.Run(ctx, o.accounting)
	}
	logger.Info("Starting", "dir", dir, "grace", o.grace, "interval", o.interval, "feedback", o.feedback,
		"accounting", o.accounting, "enforcement", eff.Enforcement, "contextAllowance", o.allowance.text, "computeMargin", o.computeMargin)
	t := time.NewTicker(o.interval)
	defer t.Stop()
	for {
		res, err := s.Sweep(ctx)
		if err != nil {
			logger.Error(err, "Sweep incomplete; nothing is removed while liveness is unknown")
		} else if len(res.Removed) > 0 {
			logger.Info("Swept", "removed", res.Removed)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// shortestPeriod is the shortest of the enabled periods (at most 1 s).
func shortestPeriod(ps ...time.Duration) time.Duration {
	out := time.Second
	for _, p := range ps {
		if p > 0 {
			out = min(out, p)
		}
	}
	return out
}

// lazyNVML initialises NVML on first use and again after a failure, so a
// monitor started before the driver is ready catches up; until then every
// pass fails (nothing judged, the error metric set).
type lazyNVML struct {
	mu   sync.Mutex
	l    gpu.ProcessLister
	b    gpu.BusySampler // the compute check's per-process samples, through the same NVML
	init bool
}

func (n *lazyNVML) Processes() ([]gpu.DeviceProcesses, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.start(); err != nil {
		return nil, err
	}
	return n.l.Processes()
}

func (n *lazyNVML) Busy() ([]gpu.DeviceBusy, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.start(); err != nil {
		return nil, err
	}
	return n.b.Busy()
}

// start initialises NVML once (n.mu held).
func (n *lazyNVML) start() error {
	if !n.init {
		if err := n.l.Init(); err != nil {
			return err
		}
		n.init = true
	}
	return nil
}

func (n *lazyNVML) shutdown() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.init {
		n.l.Shutdown()
	}
}
