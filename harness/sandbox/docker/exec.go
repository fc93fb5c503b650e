package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/limitbed/limitbed/harness/sandbox"
)

// Exec is `docker exec`: the process gets the container's environment plus opts.Env. It talks to
// the engine directly (testcontainers-go's Exec merges stdout and stderr and has no stdin).
func (c *dockerContainer) Exec(ctx context.Context, cmd []string, opts sandbox.ExecOptions) (sandbox.ExecResult, error) {
	id := c.tc.GetContainerID()
	created, err := c.cli.ExecCreate(ctx, id, client.ExecCreateOptions{
		User:         opts.User,
		AttachStdin:  opts.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
		Env:          sandbox.EnvList(opts.Env),
		Cmd:          cmd,
	})
	if err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("docker: exec %q: create: %w", cmd, err)
	}
	att, err := c.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("docker: exec %q: attach: %w", cmd, err)
	}
	defer att.Close()

	if opts.Stdin != nil {
		go func() {
			_, _ = io.Copy(att.Conn, opts.Stdin)
			_ = att.CloseWrite()
		}()
	}
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(&stdout, &stderr, att.Reader)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, io.EOF) {
			return sandbox.ExecResult{}, fmt.Errorf("docker: exec %q: read output: %w", cmd, err)
		}
	case <-ctx.Done():
		att.Close()
		<-done
		return sandbox.ExecResult{}, fmt.Errorf("docker: exec %q: %w", cmd, ctx.Err())
	}

	// The engine marks the exec finished shortly after closing the stream.
	for {
		insp, err := c.cli.ExecInspect(ctx, created.ID, client.ExecInspectOptions{})
		if err != nil {
			return sandbox.ExecResult{}, fmt.Errorf("docker: exec %q: inspect: %w", cmd, err)
		}
		if !insp.Running {
			return sandbox.ExecResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: insp.ExitCode}, nil
		}
		select {
		case <-ctx.Done():
			return sandbox.ExecResult{}, fmt.Errorf("docker: exec %q: %w", cmd, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
