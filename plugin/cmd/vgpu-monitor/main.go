// Command vgpu-monitor removes what dead pods left under
// <HOOK_PATH>/vgpu/containers (cache directories, .limits files, temporary
// files of interrupted writes), exports per-container limits and usage
// as Prometheus metrics, decides the `default` compute policy of every
// container (util_switch in its usage region), and holds every container's
// GPU memory by the driver's count against its limit (report or kill).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/internal/flagenv"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/monitor"
)

type options struct {
	nodeName         string
	kubeconfig       string
	hookPath         string
	podResources     string
	grace            time.Duration
	interval         time.Duration
	scrapeTimeout    time.Duration
	feedback         time.Duration
	metricsAddress   string
	deviceConfigFile string
	nodeConfigFile   string
	nvmlLibrary      string
	accounting       time.Duration
	allowance        memoryValue
	computeMargin    float64
}

// memoryValue is a flag in the limits' memory grammar ([0-9]+[kKmMgG]?, bytes).
type memoryValue struct {
	bytes uint64
	text  string
}

func (m *memoryValue) String() string { return m.text }

func (m *memoryValue) Set(s string) error {
	b, err := limitsfile.ParseMemory(s)
	if err != nil {
		return err
	}
	m.bytes, m.text = b, s
	return nil
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
	if o.accounting < 0 {
		return options{}, fmt.Errorf("--accounting-interval (ACCOUNTING_INTERVAL) must not be negative, got %v", o.accounting)
	}
	if !(o.computeMargin > 0 && o.computeMargin <= 1) { // NaN too
		return options{}, fmt.Errorf("--compute-margin (COMPUTE_MARGIN) must be in (0, 1], got %v", o.computeMargin)
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
	fs.StringVar(&o.deviceConfigFile, "device-config-file", "", "global device configuration (nvidia.enforcement, nvidia.resourceCountName); empty: none")
	fs.StringVar(&o.nodeConfigFile, "node-config-file", "/config/config.json", "per-node overrides (config.json); a missing file means none")
	fs.StringVar(&o.nvmlLibrary, "nvml-library", "", "path of libnvidia-ml.so.1 (the driver's or fakegpu's); empty: the loader's search path")
	fs.DurationVar(&o.accounting, "accounting-interval", monitor.DefaultAccountingInterval, "time between driver-truth accounting passes (every container's GPU memory by the driver's count against its limit); 0 disables them")
	o.allowance = memoryValue{bytes: monitor.DefaultContextAllowance, text: "1g"}
	fs.Float64Var(&o.computeMargin, "compute-margin", monitor.DefaultComputeMargin, "the share of a GPU a container's processes may be busy, by the driver's samples, beyond the share the node scheduler allowed it (its slices, free time and drains) before they are judged outside their slices")
	fs.Var(&o.allowance, "context-allowance", "GPU memory each process may hold beyond its container's limit by the driver's count (its context and the driver's rounding), in the limits' grammar (1g, 600m)")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.Var(klogFlags.Lookup("v").Value, "v", "log verbosity")
	flagenv.Usage(fs, "v")
	return fs
}
