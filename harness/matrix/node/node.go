// Package node simulates one GPU node for the harness: a HOOK_PATH laid out as HAMi's init
// container leaves it (vgpu/libvgpu.so, vgpu/ld.so.preload), the device plugin serving the
// kubelet device-plugin API on a unix socket, a fake kubelet that registers and dials it over real
// gRPC, and an in-memory API server holding the pods the HAMi scheduler would have bound (fake
// clientset). Allocate goes the whole way: pod annotations → kubelet Allocate → the plugin's
// ContainerAllocateResponse → a sandbox.ContainerSpec ready for a backend.
//
// With Config.External the plugin is a separate binary instead (a real old release): the node starts
// it as its DaemonSet would, in a private mount namespace with the kubelet's fixed device-plugins
// directory, against the same fake kubelet and an HTTP API server (harness/fakeapi) reached through
// a kubeconfig; see ExternalPlugin. Either way the harness plays HAMi's scheduler by its protocol,
// node lock included (harness/scheduler).
//
// Scenarios (harness/script) and the compatibility matrix (harness/matrix) share it.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/limitbed/limitbed/harness/fakeapi"
	"github.com/limitbed/limitbed/plugin/allocate"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/delivery"
	"github.com/limitbed/limitbed/plugin/deviceplugin"
	"github.com/limitbed/limitbed/plugin/deviceplugin/fakekubelet"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/gpu/gpumock"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/pods"
)

// Name of the simulated node, as the scheduler writes it into hami.io/vgpu-node.
const Name = "limitbed-node"

// ResourceName is the resource the plugin advertises.
const ResourceName = "nvidia.com/gpu"

// Artifacts locates the C build: fakegpu's libraries and tools, the libvgpu.so builds.
type Artifacts struct {
	Lib string // libcuda.so.1, libnvidia-ml.so.1, libvgpu.so, libvgpu-hami-v2.10.so
	Bin string // cudaprobe, gpuinfo, regiondump
}

// CoreLink says how the node's core behaves at load time: LinkAsNeeded (as built), or
// LinkNoAsNeeded, as if it had been linked with -Wl,--no-as-needed: the test double
// libneeds-driver.so (built next to the core: it needs libcuda.so.1 and libnvidia-ml.so.1 and
// nothing else) is preloaded right after it, so every process of the container loads the driver's
// libraries at start, as with HAMi-core built by a toolchain without Debian's --as-needed default.
const (
	LinkAsNeeded   = "as-needed"
	LinkNoAsNeeded = "no-as-needed"
	// DriverDouble is the test double's file name in Artifacts.Lib, and DriverDoublePath where
	// containers see it.
	DriverDouble     = "libneeds-driver.so"
	DriverDoublePath = "/opt/limitbed/" + DriverDouble
)

// CheckLink accepts "" (as-needed), LinkAsNeeded and LinkNoAsNeeded.
func CheckLink(link string) error {
	switch link {
	case "", LinkAsNeeded, LinkNoAsNeeded:
		return nil
	}
	return fmt.Errorf("core link %q: want %s or %s", link, LinkAsNeeded, LinkNoAsNeeded)
}

// Core names the libvgpu.so installed on the node: "current", "hami-v2.10" or a file path (a real
// old release).
func (a Artifacts) Core(core string) string {
	switch core {
	case "", "current":
		return filepath.Join(a.Lib, "libvgpu.so")
	case "hami-v2.10":
		return filepath.Join(a.Lib, "libvgpu-hami-v2.10.so")
	}
	return core
}

// Config configures a node and its plugin.
type Config struct {
	// Dir is the node's private directory (HOOK_PATH, sockets, fake GPU state). Required; keep it
	// short: it holds unix sockets.
	Dir       string
	Artifacts Artifacts
	// GPUProfile is the fakegpu profile the node's GPUs follow (mounted at /etc/fakegpu/profile).
	GPUProfile string
	// Plugin is the plugin's compat profile: current or hami-v2.10.
	Plugin allocate.Profile
	// Delivery is the global limitDelivery; "" leaves it to the default (file).
	Delivery v1.LimitDelivery
	// AllowPodEnv opens the admin gate for hami.io/limit-delivery=env.
	AllowPodEnv bool
	// Core is what goes to HOOK_PATH/vgpu/libvgpu.so (see Artifacts.Core).
	Core string
	// CoreLink: "" or LinkAsNeeded, or LinkNoAsNeeded (the driver double preloaded after the core).
	CoreLink string
	// MIG runs the node in MIG mode.
	MIG bool
	// External, when set, runs this plugin binary (against the fake kubelet and a fake API server,
	// harness/fakeapi) instead of the in-process plugin; Plugin then only names the column.
	External *ExternalPlugin
	// FS, when set, is the limits file writer's filesystem (fault injection).
	FS limitsfile.FS
	// SplitCount is how many virtual devices each GPU is advertised as (default 10).
	SplitCount uint
	// HTTPAPI serves the node's API server over HTTP (harness/fakeapi) for the in-process plugin
	// too, so that node agents run as binaries (the vgpu-monitor) reach it through a kubeconfig.
	HTTPAPI bool
	Logger  *slog.Logger
}

// Node is a running simulated node.
type Node struct {
	cfg      Config
	HookPath string // HOOK_PATH: <Dir>/hook
	StateDir string // host side of the fake driver's shared device state
	gpus     []gpumock.GPU
	kube     kubernetes.Interface
	api      *fakeapi.Server // the external plugin's API server; nil in process
	ds       *daemonSet      // the external plugin's mount namespace; nil in process
	kubelet  *fakekubelet.Kubelet
	podRes   *fakekubelet.PodResources // the kubelet's pod-resources API: what each container holds
	client   *fakekubelet.Plugin
	cancel   context.CancelFunc
	done     chan struct{}
	exited   chan struct{} // the external plugin's process ended (exitErr says how)
	exitErr  error

	mu      sync.Mutex
	devices []string // advertised device IDs, as ListAndWatch last sent them
	used    map[string]bool
	pods    map[string]*Pod
	seq     int
}

// Start lays out HOOK_PATH, starts the fake kubelet and the plugin, and waits until the plugin has
// registered and sent its device list.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Dir == "" || cfg.Logger == nil {
		return nil, errors.New("node: Dir and Logger are required")
	}
	if err := CheckLink(cfg.CoreLink); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if cfg.SplitCount == 0 {
		cfg.SplitCount = 10
	}
	gpus, err := ReadProfile(cfg.GPUProfile)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n := &Node{cfg: cfg, HookPath: filepath.Join(cfg.Dir, "hook"), StateDir: filepath.Join(cfg.Dir, "fakegpu"),
		gpus: gpus, used: map[string]bool{}, pods: map[string]*Pod{}}
	if cfg.External != nil || cfg.HTTPAPI {
		if err := n.startAPI(); err != nil {
			n.Close()
			return nil, err
		}
	} else {
		n.kube = fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: Name}})
	}
	if err := n.installHook(); err != nil {
		n.Close()
		return nil, err
	}
	// Every user in the container (root and tenant) shares the fake device state, as on a GPU.
	if err := os.MkdirAll(n.StateDir, 0o1777); err != nil {
		n.Close()
		return nil, fmt.Errorf("node: fake GPU state dir: %w", err)
	}
	if err := os.Chmod(n.StateDir, 0o1777); err != nil {
		n.Close()
		return nil, fmt.Errorf("node: fake GPU state dir: %w", err)
	}
	if err := n.startPlugin(ctx); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// installHook does what HAMi's init container does: copy libvgpu.so and write ld.so.preload.
func (n *Node) installHook() error {
	if err := os.MkdirAll(paths.ContainersDir(n.HookPath), 0o755); err != nil {
		return fmt.Errorf("node: create HOOK_PATH: %w", err)
	}
	src := n.cfg.Artifacts.Core(n.cfg.Core)
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("node: install libvgpu.so (core %q): %w", n.cfg.Core, err)
	}
	// Replace, never rewrite in place: running containers have the old library mapped.
	if err := replaceFile(paths.LibPath(n.HookPath), data, 0o755); err != nil {
		return fmt.Errorf("node: install libvgpu.so: %w", err)
	}
	preload := paths.ContainerLibPath + "\n"
	if n.cfg.CoreLink == LinkNoAsNeeded {
		double := filepath.Join(n.cfg.Artifacts.Lib, DriverDouble)
		if _, err := os.Stat(double); err != nil {
			return fmt.Errorf("node: core link %s needs the driver double (make c builds it): %w", LinkNoAsNeeded, err)
		}
		preload += DriverDoublePath + "\n"
	}
	if err := replaceFile(paths.PreloadPath(n.HookPath), []byte(preload), 0o644); err != nil {
		return fmt.Errorf("node: write ld.so.preload: %w", err)
	}
	return nil
}

func replaceFile(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (n *Node) startPlugin(ctx context.Context) error {
	dpDir := filepath.Join(n.cfg.Dir, "dp")
	if err := os.MkdirAll(dpDir, 0o755); err != nil {
		return fmt.Errorf("node: device-plugins dir: %w", err)
	}
	k, err := fakekubelet.Start(dpDir)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.kubelet = k
	if n.podRes, err = fakekubelet.StartPodResources(filepath.Join(n.cfg.Dir, "pr.sock")); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.cfg.External != nil {
		if err := n.startExternal(ctx, k, dpDir); err != nil {
			return err
		}
	} else if err := n.startInProcess(ctx, k, dpDir); err != nil {
		return err
	}
	return n.connect(ctx, k)
}

// startInProcess runs deviceplugin.Run in this process with the fake clientset.
func (n *Node) startInProcess(ctx context.Context, k *fakekubelet.Kubelet, dpDir string) error {
	mode := v1.OperatingModeHAMiCore
	if n.cfg.MIG {
		mode = v1.OperatingModeMIG
	}
	alloc, err := allocate.New(allocate.Options{
		HookPath:      n.HookPath,
		LockDir:       filepath.Join(n.cfg.Dir, "vgpulock"),
		Profile:       n.cfg.Plugin,
		OperatingMode: mode,
		FakeDriver: &allocate.FakeDriver{
			LibDir: n.cfg.Artifacts.Lib, ProfilePath: n.cfg.GPUProfile, StateDir: n.StateDir,
		},
		FS: n.cfg.FS,
	})
	if err != nil {
		return fmt.Errorf("node: allocator: %w", err)
	}
	layers := delivery.Layers{AllowPodOverride: n.cfg.AllowPodEnv}
	if n.cfg.Delivery != "" {
		d := n.cfg.Delivery
		layers.Global = &d
	}
	opts := deviceplugin.Options{
		ResourceName:  ResourceName,
		PluginDir:     dpDir,
		SocketName:    pluginSocket,
		KubeletSocket: k.Socket,
		SplitCount:    n.cfg.SplitCount,
		Devices:       &gpu.Discoverer{Lib: gpumock.New(n.gpus...)},
		Pods:          &pods.Client{Kube: n.kube, NodeName: Name},
		Allocator:     alloc,
		Delivery:      layers,
		Logger:        logr.FromSlogHandler(n.cfg.Logger.With("component", "device-plugin").Handler()),
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel, n.done = cancel, make(chan struct{})
	go func() {
		defer close(n.done)
		if err := deviceplugin.Run(runCtx, opts); err != nil {
			n.cfg.Logger.Error("device plugin stopped", "err", err)
		}
	}()
	return nil
}

// connect waits for the plugin's registration, dials the endpoint it registered and reads its first
// device list, as the kubelet does. An external plugin that exits meanwhile fails it at once.
func (n *Node) connect(ctx context.Context, k *fakekubelet.Kubelet) error {
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if n.exited != nil {
		go func() {
			select {
			case <-n.exited:
				wcancel()
			case <-wctx.Done():
			}
		}()
	}
	failed := func(what string, err error) error {
		if n.exited != nil {
			select {
			case <-n.exited:
				return fmt.Errorf("node: %s: plugin %s exited: %v%s", what, n.cfg.External.Path, n.exitErr, n.pluginLogTail())
			default:
			}
		}
		return fmt.Errorf("node: %s: %w%s", what, err, n.pluginLogTail())
	}
	reg, err := k.WaitForRegistration(wctx)
	if err != nil {
		return failed("plugin did not register", err)
	}
	if reg.ResourceName != ResourceName {
		return failed("registration", fmt.Errorf("resource %q, want %q", reg.ResourceName, ResourceName))
	}
	cl, err := k.Dial(reg.Endpoint)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.client = cl
	// The watch lives as long as the plugin: it ends when Close closes the connection.
	lists, err := cl.Watch(context.WithoutCancel(ctx))
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	select {
	case devs, ok := <-lists:
		if !ok {
			return failed("ListAndWatch ended before the first device list", errors.New("stream closed"))
		}
		n.setDevices(devs)
	case <-wctx.Done():
		return failed("no device list from the plugin", wctx.Err())
	}
	go func() {
		for devs := range lists {
			n.setDevices(devs)
		}
	}()
	n.cfg.Logger.Debug("node started", "hook", n.HookPath, "plugin", n.cfg.Plugin, "core", n.cfg.Core, "delivery", n.cfg.Delivery)
	return nil
}

// Close stops the plugin and the fake kubelet; the node's files stay (Dir is the caller's).
func (n *Node) Close() {
	if n.client != nil {
		_ = n.client.Close()
	}
	if n.cancel != nil {
		n.cancel()
		<-n.done
	}
	if n.ds != nil {
		if err := n.ds.stop(context.Background()); err != nil {
			n.cfg.Logger.Error("plugin namespace", "err", err)
		}
	}
	if n.kubelet != nil {
		n.kubelet.Stop()
	}
	if n.podRes != nil {
		n.podRes.Stop()
	}
	if n.api != nil {
		n.api.Close()
	}
}

// Kube is a client of the node's API server (the fake clientset in process; a clientset of the fake
// API server with an external plugin), for inspecting pod annotations.
func (n *Node) Kube() kubernetes.Interface { return n.kube }

// GPUs are the node's GPUs, as the profile describes them.
func (n *Node) GPUs() []gpumock.GPU { return n.gpus }

// Config is the configuration the node was started with.
func (n *Node) Config() Config { return n.cfg }
