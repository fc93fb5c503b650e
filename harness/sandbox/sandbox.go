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
	"os/exec"
	"slices"

	"github.com/limitbed/limitbed/plugin/ctrexec"
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

// The container's side of the interface is production code, shared with the doctor
// (plugin/ctrexec); these names are the harness's for it.
type (
	Feature     = ctrexec.Feature
	Container   = ctrexec.Container
	ExecOptions = ctrexec.ExecOptions
	ExecResult  = ctrexec.ExecResult
)

const (
	FeatureSSH  = ctrexec.FeatureSSH
	FeatureCron = ctrexec.FeatureCron
	// TenantUser is the non-root user the login-session launch methods switch to.
	TenantUser = ctrexec.TenantUser
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

// RuntimeID is c's ID as a container runtime reports it ("docker://<id>"), what the kubelet
// writes into a pod's status and a node agent maps a process's cgroup to; "" for a backend whose
// containers have none (the host backend's namespaces).
func RuntimeID(c Container) string {
	if r, ok := c.(interface{ RuntimeID() string }); ok {
		return r.RuntimeID()
	}
	return ""
}

var (
	// ErrUnavailable wraps why a backend cannot run here.
	ErrUnavailable = errors.New("backend unavailable")
	// ErrUnsupported wraps why a backend cannot do something asked of it.
	ErrUnsupported = ctrexec.ErrUnsupported
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
