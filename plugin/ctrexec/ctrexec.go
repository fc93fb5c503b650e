// Package ctrexec is a command in a container: the interface every way of reaching a container
// implements (the harness's sandbox backends, and an API server's exec, plugin/podexec), what one
// exec takes and gives back, and what a container may offer beyond exec. The operator's tool
// (plugin/doctor) and the test bed share it, so it lives with production code and links nothing
// but the standard library: the harness imports it, never the other way round.
package ctrexec

import (
	"context"
	"errors"
	"io"
)

// Feature names something a launch method needs from a container beyond exec.
type Feature string

const (
	FeatureSSH  Feature = "ssh"  // an sshd in the container and an ssh client to reach it
	FeatureCron Feature = "cron" // a cron daemon in the container
)

// TenantUser is the non-root user the login-session launch methods switch to. The workload image has
// it (uid 1000, passwordless sudo); the host backend adds it to its overlay when the host lacks it.
const TenantUser = "tenant"

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

// ErrUnsupported wraps why a container (or its backend) cannot do something asked of it.
var ErrUnsupported = errors.New("unsupported")
