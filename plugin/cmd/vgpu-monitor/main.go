// Command vgpu-monitor removes what dead pods left under
// <HOOK_PATH>/vgpu/containers (cache directories, .limits files, temporary
// files of interrupted writes), exports per-container limits and usage
// as Prometheus metrics, and decides the `default` compute policy of every
// container (util_switch in its usage region).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/allocate"
	"github.com/limitbed/limitbed/plugin/internal/flagenv"
	"github.com/limitbed/limitbed/plugin/monitor"
)

type options struct {
	nodeName       string
	kubeconfig     string
	hookPath       string
	podResources   string
	grace          time.Duration
	interval       time.Duration
	scrapeTimeout  time.Duration
	feedback       time.Duration
	metricsAddress string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "vgpu-monitor:", err)
		os.Exit(1)
	}
}

// run parses args (each flag falling back to its environment twin, read
// through getenv) and sweeps and serves metrics until ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string) error {
	o, err := parseFlags(args, getenv)
	if err != nil {
		return err
	}
	return serve(klog.NewContext(ctx, klog.Background().WithName("vgpu-monitor")), o)
}

func parseFlags(args []string, getenv func(string) string) (options, error) {
	var o options
	fs := newFlagSet(&o)
	if err := flagenv.Parse(fs, args, getenv, "v"); err != nil {
		return options{}, err
	}
	if o.nodeName == "" {
		return options{}, fmt.Errorf("--node-name (NODE_NAME) is required")
	}
	if o.feedback < 0 {
		return options{}, fmt.Errorf("--feedback-interval (FEEDBACK_INTERVAL) must not be negative, got %v", o.feedback)
	}
	if o.interval <= 0 {
		return options{}, fmt.Errorf("--sweep-interval (SWEEP_INTERVAL) must be positive, got %v", o.interval)
	}
	if o.scrapeTimeout <= 0 {
		return options{}, fmt.Errorf("--scrape-timeout (SCRAPE_TIMEOUT) must be positive, got %v", o.scrapeTimeout)
	}
	return o, nil
}

// newFlagSet defines every flag into o; docs/configuration.md lists them
// (TestConfigurationReferenceListsEveryFlag).
func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("vgpu-monitor", flag.ContinueOnError)
	fs.StringVar(&o.nodeName, "node-name", "", "name of this node (required)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig path; empty uses the in-cluster config")
	fs.StringVar(&o.hookPath, "hook-path", "/usr/local", "same meaning as the device plugin's: the containers dir is <hook-path>/vgpu/containers")
	fs.StringVar(&o.podResources, "pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "kubelet pod-resources socket; empty skips the kubelet check")
	fs.DurationVar(&o.grace, "grace-period", monitor.DefaultGrace, "how long the monitor must have seen a dead pod's entry (by its own clock, never the entry's times) before it is removed")
	fs.DurationVar(&o.interval, "sweep-interval", 30*time.Second, "time between sweeps")
	fs.DurationVar(&o.scrapeTimeout, "scrape-timeout", monitor.DefaultScrapeTimeout, "how long one /metrics scrape waits for the containers' usage regions; a region still being read is reported for its pod")
	fs.DurationVar(&o.feedback, "feedback-interval", monitor.DefaultFeedbackInterval, "time between decisions of the default compute policy (util_switch of every region); 0 disables them")
	fs.StringVar(&o.metricsAddress, "metrics-address", ":9394", "listen address of /metrics; empty disables it")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.Var(klogFlags.Lookup("v").Value, "v", "log verbosity")
	flagenv.Usage(fs, "v")
	return fs
}

// serve sweeps every o.interval and serves /metrics until ctx ends.
func serve(ctx context.Context, o options) error {
	logger := klog.FromContext(ctx)
	kube, err := kubeClient(o.kubeconfig)
	if err != nil {
		return err
	}
	dir := allocate.ContainersDir(o.hookPath)
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
		f := &monitor.Feedback{Dir: dir, Hold: 2 * o.feedback, Logger: logger.WithName("compute-policy")}
		go f.Run(ctx, o.feedback)
	}
	logger.Info("Starting", "dir", dir, "grace", o.grace, "interval", o.interval, "feedback", o.feedback)
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

func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}
