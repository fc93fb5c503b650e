// Package docker is harness/sandbox's Docker backend: containers through testcontainers-go, apart
// from the interface so that only what starts Docker containers links testcontainers-go.
package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"

	"github.com/limitbed/limitbed/harness/sandbox"
)

// New returns the docker backend: containers through testcontainers-go on the engine that
// DOCKER_HOST (or the default socket) names. The reaper (Ryuk) is disabled unless the environment
// says otherwise: its image cannot be pulled where no registry is reachable, and Stop removes the
// container itself.
func New(logger *slog.Logger) sandbox.Backend {
	if _, set := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !set {
		// testcontainers-go reads its configuration from the environment once, at first use.
		_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	return &dockerBackend{logger: logger.With("backend", "docker")}
}

type dockerBackend struct {
	logger *slog.Logger
}

var _ sandbox.Backend = (*dockerBackend)(nil)

func (b *dockerBackend) Name() string                    { return "docker" }
func (b *dockerBackend) Supports(f sandbox.Feature) bool { return dockerFeature(f) }

func (b *dockerBackend) Available(ctx context.Context) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return sandbox.Unavailable("docker", "no engine answers: %v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		return sandbox.Unavailable("docker", "no engine answers: %v", err)
	}
	return nil
}

// Start creates the container as a runtime would from an Allocate response: the environment, bind
// mounts with their read-only flags and device nodes, unprivileged, default capabilities.
func (b *dockerBackend) Start(ctx context.Context, spec sandbox.ContainerSpec) (sandbox.Container, error) {
	binds, err := dockerBinds(spec.Mounts)
	if err != nil {
		return nil, fmt.Errorf("docker: container %s: %w", spec.Name, err)
	}
	devices := dockerDevices(spec.Devices)
	req := testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image: spec.Image,
			Name:  spec.Name,
			Env:   spec.Env,
			Cmd:   spec.Cmd,
			HostConfigModifier: func(hc *container.HostConfig) {
				hc.Binds = binds
				hc.Resources.Devices = devices
				hc.Privileged = false
			},
		},
		Started: true,
		Logger:  printfLogger{b.logger},
	}
	b.logger.Debug("starting container", "name", spec.Name, "image", spec.Image, "binds", binds, "devices", len(devices))
	tc, err := testcontainers.GenericContainer(ctx, req)
	if err != nil {
		if tc != nil { // created but failed to start: remove it
			_ = tc.Terminate(context.WithoutCancel(ctx))
		}
		return nil, fmt.Errorf("docker: start container %s from %s: %w", spec.Name, spec.Image, err)
	}
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		_ = tc.Terminate(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("docker: client for container %s: %w", spec.Name, err)
	}
	ip, err := tc.ContainerIP(ctx)
	if err != nil {
		b.logger.Debug("no container IP", "name", spec.Name, "err", err)
	}
	return &dockerContainer{logger: b.logger.With("container", spec.Name), tc: tc, cli: cli, addr: ip}, nil
}

// dockerBinds renders mounts in the HostConfig.Binds form. Binds (not the Mounts API) because, like
// containerd's CRI plugin, they create a missing host directory instead of failing.
func dockerBinds(mounts []sandbox.Mount) ([]string, error) {
	binds := make([]string, 0, len(mounts))
	for _, m := range mounts {
		if strings.Contains(m.HostPath, ":") || strings.Contains(m.ContainerPath, ":") {
			return nil, fmt.Errorf("mount %s -> %s: a ':' in a path cannot be expressed as a bind", m.HostPath, m.ContainerPath)
		}
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		binds = append(binds, m.HostPath+":"+m.ContainerPath+":"+mode)
	}
	return binds, nil
}

func dockerDevices(devs []sandbox.Device) []container.DeviceMapping {
	out := make([]container.DeviceMapping, 0, len(devs))
	for _, d := range devs {
		perm := d.Permissions
		if perm == "" {
			perm = "rwm"
		}
		out = append(out, container.DeviceMapping{PathOnHost: d.HostPath, PathInContainer: d.ContainerPath, CgroupPermissions: perm})
	}
	return out
}

type dockerContainer struct {
	logger *slog.Logger
	tc     testcontainers.Container
	cli    *testcontainers.DockerClient
	addr   string

	stopOnce sync.Once
	stopErr  error
}

var _ sandbox.Container = (*dockerContainer)(nil)

func (c *dockerContainer) Backend() string { return "docker" }

// RuntimeID is the container's ID as the kubelet writes it into a pod's status.
func (c *dockerContainer) RuntimeID() string { return "docker://" + c.tc.GetContainerID() }
func (c *dockerContainer) Addr() string      { return c.addr }

// Supports: the workload image runs sshd and cron; other images may not, which the launch method
// then reports when the daemon does not answer.
func (c *dockerContainer) Supports(f sandbox.Feature) bool { return dockerFeature(f) }

// dockerFeature: the workload image runs sshd and cron.
func dockerFeature(f sandbox.Feature) bool {
	return f == sandbox.FeatureSSH || f == sandbox.FeatureCron
}

func (c *dockerContainer) ReadFile(ctx context.Context, path string) ([]byte, error) {
	rc, err := c.tc.CopyFileFromContainer(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("docker: read %s: %w", path, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("docker: read %s: %w", path, err)
	}
	return data, nil
}

func (c *dockerContainer) Logs(ctx context.Context) ([]byte, error) {
	rc, err := c.tc.Logs(ctx)
	if err != nil {
		return nil, fmt.Errorf("docker: logs: %w", err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, rc); err != nil {
		return nil, fmt.Errorf("docker: logs: %w", err)
	}
	return buf.Bytes(), nil
}

// Stop removes the container even when ctx is already cancelled (test cleanup after a timeout).
func (c *dockerContainer) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		c.logger.Debug("removing container")
		if err := c.tc.Terminate(ctx); err != nil {
			c.stopErr = fmt.Errorf("docker: remove container %s: %w", c.tc.GetContainerID(), err)
		}
		_ = c.cli.Close()
	})
	return c.stopErr
}

// printfLogger adapts slog to testcontainers-go's Printf logger, at debug level.
type printfLogger struct{ l *slog.Logger }

func (p printfLogger) Printf(format string, args ...any) {
	p.l.Debug(strings.TrimSpace(fmt.Sprintf(format, args...)))
}
