// Package sandbox runs "pods" for the harness: a container created exactly as a container runtime
// would create it from a device plugin's Allocate response (environment, bind mounts with their
// read-only flags, devices), behind one small interface with several backends:
//
//   - docker: a Docker container through testcontainers-go (harness/sandbox/docker, a package of
//     its own so that users of the interface alone, the doctor among them, link no test framework);
//   - host: a private mount namespace on this machine with a chroot into an overlay of / (NewHost),
//     for quick runs without Docker and for the real-GPU machines where Docker is absent.
//
// Implementations are unexported; constructors take a logger and return the Backend interface.
// EnvList and Unavailable are exported for the backends outside this package.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
)

// ContainerSpec describes one container as the runtime sees it after Allocate.
type ContainerSpec struct {
	Name    string            // unique per running container; used in names and logs
	Image   string            // ignored by the host backend (it runs the host's own root)
	Env     map[string]string // the container's environment (Allocate Envs plus the pod spec's)
	Mounts  []Mount           // bind mounts, in order
	Devices []Device          // device nodes
	Cmd     []string          // the container's command; empty: the image's default
}

// Mount is one bind mount, as in the device plugin API's Mount.
type Mount struct {
	HostPath      string
	ContainerPath string
	ReadOnly      bool
}

// Device is one device node, as in the device plugin API's DeviceSpec.
type Device struct {
	HostPath      string
	ContainerPath string
	Permissions   string // cgroup permissions, "rwm" when empty (the kubelet's default)
}

// Feature names something a launch method needs from a container beyond exec.
type Feature string

const (
	FeatureSSH  Feature = "ssh"  // an sshd in the container and an ssh client to reach it
	FeatureCron Feature = "cron" // a cron daemon in the container
)

// Backend starts containers. It is safe for concurrent use.
type Backend interface {
	// Name is the backend's short name: "docker", "host".
	Name() string
	// Available returns nil when this backend can start containers here, or an error that says
	// why not (wrapping ErrUnavailable).
	Available(ctx context.Context) error
	// Start creates and starts a container; the caller must Stop it (t.Cleanup in tests).
	Start(ctx context.Context, spec ContainerSpec) (Container, error)
	// Supports reports whether every container this backend starts offers f, so that a caller
	// can refuse work the backend cannot do before starting anything.
	Supports(f Feature) bool
}

// Container is one running container.
type Container interface {
	// Exec runs cmd in the container like `kubectl exec`/`docker exec`: the container's environment
	// plus opts.Env. A non-zero exit code is reported in ExecResult, not as an error.
	Exec(ctx context.Context, cmd []string, opts ExecOptions) (ExecResult, error)
	// ReadFile returns a file's content from inside the container.
	ReadFile(ctx context.Context, path string) ([]byte, error)
	// Logs returns the container's output so far (stdout and stderr of its main process).
	Logs(ctx context.Context) ([]byte, error)
	// Addr is the container's IP address on the engine's network, "" where there is none.
	// Launch methods ssh over loopback from inside the container instead: the host may have no
	// route to the container.
	Addr() string
	// Supports reports whether the container offers f.
	Supports(f Feature) bool
	// Backend is the name of the backend that started the container.
	Backend() string
	// Stop stops and removes the container; safe to call more than once.
	Stop(ctx context.Context) error
}

// RuntimeID is c's ID as a container runtime reports it ("docker://<id>"), what the kubelet
// writes into a pod's status and a node agent maps a process's cgroup to; "" for a backend whose
// containers have none (the host backend's namespaces).
func RuntimeID(c Container) string {
	if r, ok := c.(interface{ RuntimeID() string }); ok {
		return r.RuntimeID()
	}
	return ""
}

// ExecOptions adjusts one Exec.
type ExecOptions struct {
	User  string            // user name or uid[:gid]; empty: the container's user (root)
	Env   map[string]string // added to the container's environment, like `kubectl exec -- env K=V`
	Stdin io.Reader         // nil: empty stdin
}

// ExecResult is what one Exec produced.
type ExecResult struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int
}

var (
	// ErrUnavailable wraps why a backend cannot run here.
	ErrUnavailable = errors.New("backend unavailable")
	// ErrUnsupported wraps why a backend cannot do something asked of it.
	ErrUnsupported = errors.New("unsupported")
)

// unavailableError reads "<backend>: <reason>" and matches ErrUnavailable.
type unavailableError struct{ backend, reason string }

func (e *unavailableError) Error() string        { return e.backend + ": " + e.reason }
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unavailable is a backend's answer to Available: "<backend>: <reason>", matching ErrUnavailable.
func Unavailable(backend, format string, args ...any) error {
	return &unavailableError{backend: backend, reason: fmt.Sprintf(format, args...)}
}

// EnvList renders env maps in order, later maps overriding earlier ones, as KEY=VALUE sorted by key.
func EnvList(maps ...map[string]string) []string {
	merged := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			merged[k] = v
		}
	}
	out := make([]string, 0, len(merged))
	for k, v := range merged {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// Spawner is a container that can start a long-running process in itself (the host backend's):
// Spawn returns the command, not started, with the container's environment plus opts.Env; the
// caller sets its output and starts it. Stop kills it with the rest of the container.
type Spawner interface {
	Spawn(ctx context.Context, cmd []string, opts ExecOptions) (*exec.Cmd, error)
}
