// Package deviceplugin serves the kubelet device-plugin API (v1beta1) for
// HAMi-style shared GPUs: it advertises each GPU as deviceSplitCount virtual
// devices, registers with kubelet, re-registers when kubelet restarts, and
// turns Allocate calls into HAMi limits (see package allocate).
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/allocate"
	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/delivery"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/pods"
)

// PodSource is the pod side of the HAMi protocol (implemented by pods.Client).
type PodSource interface {
	Placement(ctx context.Context, resource string) (pods.Placement, error)
	Claim(ctx context.Context, pod *corev1.Pod, left annotations.PodDevices) error
	MarkFailed(ctx context.Context, pod *corev1.Pod) error
	ReleaseLockIfDone(ctx context.Context) error
}

var _ PodSource = (*pods.Client)(nil)

// DeviceSource lists GPUs (implemented by gpu.Discoverer).
type DeviceSource interface {
	Devices() ([]gpu.Device, error)
}

// Options configure a Plugin.
type Options struct {
	ResourceName string // e.g. nvidia.com/gpu
	// PluginDir holds the plugin socket (kubelet's device-plugins dir).
	PluginDir  string
	SocketName string
	// KubeletSocket is kubelet's registration socket; "" skips registration.
	KubeletSocket       string
	SplitCount          uint
	PreferredAllocation bool

	Devices DeviceSource
	// HealthLib, when set, is watched for critical XIDs, and polled for lost
	// GPUs where NVML events are not supported (see gpu.HealthWatcher).
	HealthLib nvml.Interface
	// HealthPollInterval is the polling period; 0 = gpu.DefaultPollInterval.
	HealthPollInterval time.Duration
	Pods               PodSource
	// APITimeout bounds each Allocate, its API calls included; 0 means
	// DefaultAPITimeout.
	APITimeout time.Duration
	// Requests is how containers' requests are read (HAMi's resource names
	// and defaults); a zero value means HAMi's defaults for ResourceName.
	Requests v1.Requests
	// MemoryScaling is deviceMemoryScaling: a GPU's memory as registered
	// (what a placement may give at most) is its memory times this; 0 means 1.
	MemoryScaling float64
	Allocator     *allocate.Allocator
	Delivery      delivery.Layers
	Recorder      delivery.EventRecorder // may be nil
	Logger        klog.Logger
}

// Plugin is one device plugin instance: one socket, one resource.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	opts Options
	log  klog.Logger

	// filesMu serialises the host side effects of Allocate (cache
	// directories, limits files); it is never held across an API call.
	// Two calls taking the same entry are told apart by the claim's
	// optimistic concurrency instead (pods.Client.Claim).
	filesMu sync.Mutex

	refusedMu sync.Mutex
	refused   map[types.UID]bool // pods refused as contenders (bounded)

	answers answers // answers given after their claims, for a kubelet's retry (answers.go)

	mu       sync.Mutex
	devices  []*pluginapi.Device
	physical map[string]string
	mig      map[string]bool // IDs of MIG devices: the device table, not the ID's spelling
	board    map[string]string
	memMiB   map[string]int64 // memory of each GPU or MIG device, as registered
	watchers map[chan struct{}]struct{}
	server   *grpc.Server
	cancel   context.CancelFunc
	done     chan struct{}
}

var _ pluginapi.DevicePluginServer = (*Plugin)(nil)

// New validates opts and returns a stopped Plugin.
func New(opts Options) (*Plugin, error) {
	switch {
	case opts.ResourceName == "":
		return nil, errors.New("device plugin: resource name is required")
	case opts.PluginDir == "" || opts.SocketName == "":
		return nil, errors.New("device plugin: plugin dir and socket name are required")
	case opts.Devices == nil || opts.Pods == nil || opts.Allocator == nil:
		return nil, errors.New("device plugin: devices, pods and allocator are required")
	}
	if opts.SplitCount == 0 {
		opts.SplitCount = 1
	}
	return &Plugin{opts: opts, log: opts.Logger.WithValues("resource", opts.ResourceName), watchers: map[chan struct{}]struct{}{},
		refused: map[types.UID]bool{}}, nil
}

// SocketPath is where the plugin listens.
func (p *Plugin) SocketPath() string { return filepath.Join(p.opts.PluginDir, p.opts.SocketName) }

// Start discovers devices, serves the API on a fresh socket, waits until it
// answers and registers with kubelet.
func (p *Plugin) Start(ctx context.Context) error {
	devs, err := p.opts.Devices.Devices()
	if err != nil {
		return fmt.Errorf("discover devices: %w", err)
	}
	list, physical, board := virtualDevices(devs, p.opts.SplitCount)
	p.mu.Lock()
	p.devices, p.physical, p.board, p.mig = list, physical, board, migIDs(devs)
	p.memMiB = registeredMemory(devs, p.opts.MemoryScaling)
	p.mu.Unlock()
	if size := listSize(list); size > maxDeviceListBytes {
		return fmt.Errorf("%d devices (%d GPUs x deviceSplitCount %d) make a device list of %d bytes, more than the kubelet accepts (%d): lower deviceSplitCount",
			len(list), len(boards(devs)), p.opts.SplitCount, size, maxDeviceListBytes)
	}

	sock := p.SocketPath()
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", sock, err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", sock, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	p.mu.Lock()
	p.server, p.cancel, p.done = srv, cancel, done
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(lis); err != nil {
			p.log.Error(err, "gRPC server stopped", "socket", sock)
		}
	}()
	if p.opts.HealthLib != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.watchHealth(runCtx, devs)
		}()
	}
	go func() { wg.Wait(); close(done) }()

	if err := waitServing(ctx, sock); err != nil {
		p.Stop()
		return err
	}
	if p.opts.KubeletSocket == "" {
		p.log.Info("Serving without kubelet registration", "socket", sock, "devices", len(list))
		return nil
	}
	if err := p.register(ctx); err != nil {
		p.Stop()
		return err
	}
	p.log.Info("Registered with kubelet", "socket", sock, "kubelet", p.opts.KubeletSocket, "devices", len(list))
	return nil
}

// Stop stops serving and waits for the server's goroutines.
func (p *Plugin) Stop() {
	p.mu.Lock()
	srv, cancel, done := p.server, p.cancel, p.done
	p.server, p.cancel, p.done = nil, nil, nil
	p.mu.Unlock()
	if srv == nil {
		return
	}
	cancel()
	srv.Stop()
	<-done
	_ = os.Remove(p.SocketPath())
}

func (p *Plugin) register(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+p.opts.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial kubelet %s: %w", p.opts.KubeletSocket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.opts.SocketName,
		ResourceName: p.opts.ResourceName,
		Options:      p.options(),
	}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("register %s with kubelet %s: %w", p.opts.ResourceName, p.opts.KubeletSocket, err)
	}
	return nil
}

// waitServing dials the plugin's own socket until it answers, so kubelet is
// never told about a socket that does not serve yet.
func waitServing(ctx context.Context, sock string) error {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial own socket %s: %w", sock, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := pluginapi.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &pluginapi.Empty{}, grpc.WaitForReady(true)); err != nil {
		return fmt.Errorf("plugin socket %s does not answer: %w", sock, err)
	}
	return nil
}

func (p *Plugin) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: p.opts.PreferredAllocation}
}
