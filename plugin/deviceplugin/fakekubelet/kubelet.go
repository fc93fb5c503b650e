// Package fakekubelet is a kubelet stand-in for device plugin tests: it
// serves the real Registration gRPC service on a unix socket in a temporary
// device-plugins directory, records registrations, and dials plugins the way
// kubelet does (ListAndWatch, GetPreferredAllocation, Allocate). Restart
// re-creates kubelet.sock as a restarting kubelet does.
//
// It is exported so other test suites (the harness) can drive a plugin.
package fakekubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// SocketName is kubelet's registration socket name.
const SocketName = "kubelet.sock"

// maxSocketPath is the usable length of sun_path (108 bytes with the NUL).
const maxSocketPath = 107

// Kubelet is a fake kubelet. Its methods are safe for concurrent use.
type Kubelet struct {
	pluginapi.UnimplementedRegistrationServer

	// Dir is the device-plugins directory; Socket is Dir/kubelet.sock.
	Dir    string
	Socket string

	regs chan *pluginapi.RegisterRequest
	mu   sync.Mutex
	srv  *grpc.Server
}

// Start serves the Registration service at dir/kubelet.sock.
func Start(dir string) (*Kubelet, error) {
	k := &Kubelet{Dir: dir, Socket: filepath.Join(dir, SocketName), regs: make(chan *pluginapi.RegisterRequest, 16)}
	if len(k.Socket) > maxSocketPath {
		return nil, fmt.Errorf("fake kubelet: socket path %s is %d bytes, unix sockets allow %d", k.Socket, len(k.Socket), maxSocketPath)
	}
	if err := k.listen(); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *Kubelet) listen() error {
	if err := os.Remove(k.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("fake kubelet: %w", err)
	}
	lis, err := net.Listen("unix", k.Socket)
	if err != nil {
		return fmt.Errorf("fake kubelet: listen on %s: %w", k.Socket, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, k)
	k.mu.Lock()
	k.srv = srv
	k.mu.Unlock()
	go func() { _ = srv.Serve(lis) }()
	return nil
}

// Register implements the Registration service.
func (k *Kubelet) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if req.Version != pluginapi.Version {
		return nil, fmt.Errorf("fake kubelet: unsupported API version %q", req.Version)
	}
	k.regs <- req
	return &pluginapi.Empty{}, nil
}

// WaitForRegistration returns the next registration.
func (k *Kubelet) WaitForRegistration(ctx context.Context) (*pluginapi.RegisterRequest, error) {
	select {
	case r := <-k.regs:
		return r, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("fake kubelet: no registration: %w", ctx.Err())
	}
}

// Restart stops serving, removes every socket in Dir (kubelet clears the
// device-plugins directory on start) and serves a new kubelet.sock.
func (k *Kubelet) Restart() error {
	k.Stop()
	entries, err := os.ReadDir(k.Dir)
	if err != nil {
		return fmt.Errorf("fake kubelet: %w", err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sock") {
			_ = os.Remove(filepath.Join(k.Dir, e.Name()))
		}
	}
	return k.listen()
}

// Stop stops serving.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	srv := k.srv
	k.srv = nil
	k.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// Plugin is a connection to a registered plugin.
type Plugin struct {
	pluginapi.DevicePluginClient
	conn *grpc.ClientConn
}

// Dial connects to the plugin socket named endpoint (as registered) in Dir.
func (k *Kubelet) Dial(endpoint string) (*Plugin, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.Dir, endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("fake kubelet: dial plugin %s: %w", endpoint, err)
	}
	return &Plugin{DevicePluginClient: pluginapi.NewDevicePluginClient(conn), conn: conn}, nil
}

// Close closes the connection.
func (p *Plugin) Close() error { return p.conn.Close() }

// Watch starts ListAndWatch and returns a channel of device lists; it closes
// when the stream ends.
func (p *Plugin) Watch(ctx context.Context) (<-chan []*pluginapi.Device, error) {
	stream, err := p.ListAndWatch(ctx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	if err != nil {
		return nil, fmt.Errorf("fake kubelet: ListAndWatch: %w", err)
	}
	out := make(chan []*pluginapi.Device, 16)
	go func() {
		defer close(out)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case out <- resp.Devices:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// AllocateOne asks for devices for one container, as kubelet does per container.
func (p *Plugin) AllocateOne(ctx context.Context, ids ...string) (*pluginapi.ContainerAllocateResponse, error) {
	resp, err := p.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}},
	}, grpc.WaitForReady(true))
	if err != nil {
		return nil, err
	}
	if len(resp.ContainerResponses) != 1 {
		return nil, fmt.Errorf("fake kubelet: %d container responses for one request", len(resp.ContainerResponses))
	}
	return resp.ContainerResponses[0], nil
}

// TB is the part of testing.TB that ShortTempDir needs.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// ShortTempDir returns a fresh directory under os.TempDir with a short name:
// t.TempDir() embeds the test name and easily exceeds the 108-byte limit of
// a unix socket path.
func ShortTempDir(t TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kl")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
