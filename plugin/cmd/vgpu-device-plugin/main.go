// Command vgpu-device-plugin is the HAMi-compatible vGPU device plugin: it
// advertises shared GPUs to kubelet and delivers limits to HAMi-core through
// the environment and, by default, the /overrideEnv limits file.
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
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/deviceplugin"
	"github.com/limitbed/limitbed/plugin/internal/flagenv"
)

// maxAPITimeout bounds --api-timeout: past it the kubelet's admission of
// every pod on the node would wait that long behind a silent API server.
const maxAPITimeout = 5 * time.Minute

// options are the command-line settings; each flag has an UPPER_SNAKE env twin.
type options struct {
	nodeName         string
	kubeconfig       string
	deviceConfigFile string
	nodeConfigFile   string
	pluginDir        string
	socketName       string
	kubeletSocket    string
	hookPath         string
	lockDir          string
	nvmlLibrary      string
	compatProfile    string
	healthChecks     bool
	computeScheduler bool
	fakeDriver       bool
	fakeLibDir       string
	fakeProfile      string
	fakeStateDir     string
	apiTimeout       time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "vgpu-device-plugin:", err)
		os.Exit(1)
	}
}

// run parses args (each flag falling back to its environment twin, read
// through getenv) and serves until ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string) error {
	o, err := parseFlags(args, getenv)
	if err != nil {
		return err
	}
	logger := klog.Background().WithName("vgpu-device-plugin")
	return serve(klog.NewContext(ctx, logger), o)
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
	if o.fakeDriver && o.fakeLibDir == "" {
		return options{}, fmt.Errorf("--fake-driver needs --fake-driver-lib-dir (FAKE_DRIVER_LIB_DIR)")
	}
	if o.apiTimeout <= 0 || o.apiTimeout > maxAPITimeout {
		return options{}, fmt.Errorf("--api-timeout (API_TIMEOUT) must be in (0, %v], got %v", maxAPITimeout, o.apiTimeout)
	}
	return o, nil
}

// newFlagSet defines every flag into o; docs/configuration.md lists them
// (TestConfigurationReferenceListsEveryFlag).
func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("vgpu-device-plugin", flag.ContinueOnError)
	fs.StringVar(&o.nodeName, "node-name", "", "name of this node (required)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig path; empty uses the in-cluster config")
	fs.StringVar(&o.deviceConfigFile, "device-config-file", "", "global device configuration (HAMi device-config.yaml, nvidia: section)")
	fs.StringVar(&o.nodeConfigFile, "node-config-file", "/config/config.json", "per-node overrides (config.json); a missing file means none")
	fs.StringVar(&o.pluginDir, "device-plugin-dir", pluginapi.DevicePluginPath, "directory of device plugin sockets")
	fs.StringVar(&o.socketName, "socket-name", "hami-vgpu.sock", "socket file name in --device-plugin-dir")
	fs.StringVar(&o.kubeletSocket, "kubelet-socket", pluginapi.KubeletSocket, "kubelet registration socket; empty disables registration")
	fs.StringVar(&o.hookPath, "hook-path", "/usr/local", "host install root: libvgpu.so, ld.so.preload and containers/ live under <hook-path>/vgpu")
	fs.StringVar(&o.lockDir, "vgpu-lock-dir", "/tmp/vgpulock", "host directory mounted at /tmp/vgpulock; empty disables the mount")
	fs.StringVar(&o.nvmlLibrary, "nvml-library", "", "path of libnvidia-ml.so.1 (real or fakegpu); empty uses the loader's search path")
	fs.StringVar(&o.compatProfile, "compat-profile", "current", "behave like: current | hami-v2.10 (env only, random <uuid>.cache, no file)")
	fs.BoolVar(&o.healthChecks, "health-checks", true, "watch NVML for critical XIDs and mark GPUs unhealthy")
	fs.BoolVar(&o.computeScheduler, "compute-scheduler", false, "vgpu-scheduler runs on this node: give each container its grant file (<hook-path>/vgpu/sched/<key>.grant, read-only at /usr/local/vgpu/sched.grant)")
	fs.BoolVar(&o.fakeDriver, "fake-driver", false, "test bed: mount fakegpu's libraries, profile and state into containers")
	fs.StringVar(&o.fakeLibDir, "fake-driver-lib-dir", "", "host dir with fakegpu's libcuda.so.1 and libnvidia-ml.so.1")
	fs.StringVar(&o.fakeProfile, "fake-driver-profile", "", "host path of the fakegpu profile, mounted at fakegpu's default /etc/fakegpu/profile")
	fs.StringVar(&o.fakeStateDir, "fake-driver-state-dir", "", "host dir of the shared fakegpu state, mounted at fakegpu's default /run/fakegpu")
	fs.DurationVar(&o.apiTimeout, "api-timeout", deviceplugin.DefaultAPITimeout, "bound of one Allocate, its API server requests included (the kubelet waits for Allocate without a deadline)")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.Var(klogFlags.Lookup("v").Value, "v", "log verbosity")
	flagenv.Usage(fs, "v")
	return fs
}
