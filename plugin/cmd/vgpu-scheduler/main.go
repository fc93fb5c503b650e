// Command vgpu-scheduler is the node's per-GPU compute scheduler: it gives the containers that
// share a GPU exclusive time slices in proportion to their compute limits, through each
// container's grant file (<hook-path>/vgpu/sched/<key>.grant, mounted read-only in the container)
// and its report (<hook-path>/vgpu/containers/<key>/sched.report, written by libvgpu.so). See
// docs/plugin.md, "vgpu-scheduler".
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
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/identity"
	"github.com/limitbed/limitbed/plugin/identity/kubesource"
	"github.com/limitbed/limitbed/plugin/internal/flagenv"
	kubeclient "github.com/limitbed/limitbed/plugin/internal/kube"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/schedproto"
	"github.com/limitbed/limitbed/plugin/timeslice"
)

type options struct {
	nodeName       string
	kubeconfig     string
	podResources   string
	hookPath       string
	period         time.Duration
	drainWait      time.Duration
	calibrate      time.Duration
	nvmlLibrary    string
	metricsAddress string
	traceFile      string
	clockGain      float64
}

// schedulerAPITimeout bounds each API server request of the scheduler's identity lookups: a
// silent API server delays a refresh, never the slices.
const schedulerAPITimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "vgpu-scheduler:", err)
		os.Exit(1)
	}
}

// run parses args (each flag falling back to its environment twin, read through getenv) and
// schedules until ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string) error {
	o, err := parseFlags(args, getenv)
	if err != nil {
		return err
	}
	return serve(klog.NewContext(ctx, klog.Background().WithName("vgpu-scheduler")), o)
}

func parseFlags(args []string, getenv func(string) string) (options, error) {
	var o options
	fs := newFlagSet(&o)
	if err := flagenv.Parse(fs, args, getenv, "v"); err != nil {
		return options{}, err
	}
	if o.period < 10*time.Millisecond || o.period > 10*time.Second {
		return options{}, fmt.Errorf("--period (PERIOD) must be 10ms..10s, got %v", o.period)
	}
	if o.calibrate < 0 || o.calibrate > time.Minute {
		return options{}, fmt.Errorf("--calibrate (CALIBRATE) must be 0 (never) to 1m, got %v", o.calibrate)
	}
	if o.clockGain < 0 || o.clockGain > 1 {
		return options{}, fmt.Errorf("--clock-gain (CLOCK_GAIN) must be 0 (the card's) or above 0 up to 1, got %v", o.clockGain)
	}
	if o.drainWait <= 0 || o.drainWait >= o.period {
		return options{}, fmt.Errorf("--drain-wait (DRAIN_WAIT) must be positive and shorter than --period (%v), got %v", o.period, o.drainWait)
	}
	return o, nil
}

// newFlagSet defines every flag into o; docs/configuration.md lists them
// (TestConfigurationReferenceListsEveryFlag).
func newFlagSet(o *options) *flag.FlagSet {
	d := timeslice.DefaultConfig()
	fs := flag.NewFlagSet("vgpu-scheduler", flag.ContinueOnError)
	fs.StringVar(&o.nodeName, "node-name", "", "this node: containers are identified from the API server, the kubelet and the limits files; empty: from the limits files alone (file mode only)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig path; empty uses the in-cluster config (with --node-name)")
	fs.StringVar(&o.podResources, "pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "kubelet pod-resources socket: the GPUs of each container (with --node-name); empty: the scheduler's placement")
	fs.StringVar(&o.hookPath, "hook-path", "/usr/local", "same meaning as the device plugin's: grant files in <hook-path>/vgpu/sched, reports in <hook-path>/vgpu/containers")
	fs.DurationVar(&o.period, "period", d.Period, "the scheduling period: slices in proportion to the limits over it, and the longest a container owed a slice waits for it")
	fs.DurationVar(&o.drainWait, "drain-wait", d.DrainWait, "how long the next slice waits for the last one's work to drain before it starts beside it")
	fs.DurationVar(&o.calibrate, "calibrate", d.Calibrate, "how long a GPU whose limited containers leave it partly idle is filled with their slices to learn its SM clock at full load (slices are charged by the clock against it); 0: never")
	fs.StringVar(&o.nvmlLibrary, "nvml-library", "", "path of libnvidia-ml.so.1 (the driver's or fakegpu's), read for each GPU's SM clock; empty: the loader's search path")
	fs.StringVar(&o.metricsAddress, "metrics-address", ":9395", "listen address of /metrics; empty disables it")
	fs.Float64Var(&o.clockGain, "clock-gain", 0, "the part of the SM clock's gain over its full-load value that is work on this node's GPUs (0 < gain <= 1; docs/plugin.md, \"Work, not time\"); 0: each card's own, by its name (1 for a card not in the table)")
	fs.StringVar(&o.traceFile, "trace-file", "", "write every slice (grant, first launch, revocation, drain) and clock reading to this file as JSON lines (a measurement aid; docs/plugin.md, \"The trace\"); empty: none")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.Var(klogFlags.Lookup("v").Value, "v", "log verbosity")
	flagenv.Usage(fs, "v")
	return fs
}

// serve schedules and serves /metrics until ctx ends.
func serve(ctx context.Context, o options) error {
	logger := klog.FromContext(ctx)
	cfg := timeslice.DefaultConfig()
	cfg.Period, cfg.DrainWait, cfg.Calibrate, cfg.ClockGain = o.period, o.drainWait, o.calibrate, o.clockGain
	containers := paths.ContainersDir(o.hookPath)
	var src timeslice.Source = timeslice.LimitsFiles{Dir: containers}
	if o.nodeName != "" {
		kube, err := kubeclient.Client(o.kubeconfig, schedulerAPITimeout)
		if err != nil {
			return err
		}
		sources := &identity.Sources{Pods: &kubesource.APIServer{Kube: kube, NodeName: o.nodeName}, ContainersDir: containers}
		if o.podResources != "" {
			sources.Devices = &kubesource.Kubelet{Socket: o.podResources}
		}
		src = &timeslice.Snapshots{Take: sources.Snapshot}
	}
	clocks := &gpu.Clocks{Lib: gpu.NewLibrary(o.nvmlLibrary)}
	defer clocks.Shutdown()
	n := &timeslice.Node{
		GrantDir: schedproto.GrantDir(o.hookPath), ContainersDir: containers,
		Source: src, Config: cfg, Logger: logger, Clocks: clocks,
	}
	if o.traceFile != "" {
		f, err := os.OpenFile(o.traceFile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return fmt.Errorf("--trace-file: %w", err)
		}
		tw := timeslice.NewTraceWriter(f)
		n.Tracer = tw
		defer func() {
			if err := tw.Close(); err != nil {
				logger.Error(err, "Trace incomplete", "file", o.traceFile)
			}
		}()
	}
	if o.metricsAddress != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(&timeslice.Collector{Node: n})
		srv := &http.Server{Addr: o.metricsAddress, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "Metrics server stopped")
			}
		}()
		defer srv.Shutdown(context.Background())
	}
	inst, err := timeslice.Claim(n.GrantDir, time.Now())
	if err != nil {
		return err
	}
	defer inst.Release()
	logger.Info("Starting", "grants", n.GrantDir, "containers", containers, "period", cfg.Period, "drainWait", cfg.DrainWait,
		"identity", map[bool]string{true: "API server, kubelet, limits files", false: "limits files"}[o.nodeName != ""])
	return n.Run(ctx)
}
