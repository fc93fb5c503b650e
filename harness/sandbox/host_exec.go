package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Exec enters the container's mount namespace and chroot, with the environment a runtime gives an
// exec'd process: PATH and HOME, the spec's Env, then opts.Env. With opts.User it drops to that user
// (setpriv, resolved in the container's /etc/passwd), like `docker exec -u`; no login session is made.
func (c *hostContainer) Exec(ctx context.Context, cmd []string, opts ExecOptions) (ExecResult, error) {
	proc, err := c.Spawn(ctx, cmd, opts)
	if err != nil {
		return ExecResult{}, err
	}
	var stdout, stderr bytes.Buffer
	proc.Stdout, proc.Stderr, proc.Stdin = &stdout, &stderr, opts.Stdin
	err = proc.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return ExecResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}, nil
	case errors.As(err, &exitErr) && exitErr.ExitCode() >= 0 && ctx.Err() == nil:
		return ExecResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: exitErr.ExitCode()}, nil
	default:
		return ExecResult{}, fmt.Errorf("host: exec %q: %w: %s", cmd, err, bytes.TrimSpace(stderr.Bytes()))
	}
}

// Spawn returns, not started, the command Exec runs: cmd in the container's mount namespace and
// chroot with the container's environment. A long-running process (a device plugin serving the
// node) is started this way and outlives no Stop: Stop kills every process in the namespace.
func (c *hostContainer) Spawn(ctx context.Context, cmd []string, opts ExecOptions) (*exec.Cmd, error) {
	if len(cmd) == 0 {
		return nil, fmt.Errorf("host: exec: empty command")
	}
	base := map[string]string{"PATH": containerPATH, "HOME": "/root", "HOSTNAME": c.spec.Name}
	args := []string{"-t", fmt.Sprint(c.pid()), "-m", "--", "chroot", c.root}
	if opts.User != "" && opts.User != "root" && opts.User != "0" {
		u, err := c.lookupUser(ctx, opts.User)
		if err != nil {
			return nil, err
		}
		base["HOME"] = u.home
		args = append(args, "setpriv", "--reuid="+u.uid, "--regid="+u.gid, "--init-groups")
	}
	args = append(args, "env", "-i", "--")
	args = append(args, EnvList(base, c.spec.Env, opts.Env)...)
	args = append(args, cmd...)
	return exec.CommandContext(ctx, "nsenter", args...), nil
}

type hostUser struct{ uid, gid, home string }

func (c *hostContainer) lookupUser(ctx context.Context, name string) (hostUser, error) {
	out, err := exec.CommandContext(ctx, "nsenter", "-t", fmt.Sprint(c.pid()), "-m", "--",
		"chroot", c.root, "getent", "passwd", name).Output()
	if err != nil {
		return hostUser{}, fmt.Errorf("host: user %q not found in the container: %w", name, err)
	}
	f := strings.Split(strings.TrimSpace(string(out)), ":")
	if len(f) < 6 {
		return hostUser{}, fmt.Errorf("host: user %q: malformed passwd entry %q", name, out)
	}
	return hostUser{uid: f[2], gid: f[3], home: f[5]}, nil
}

var _ Spawner = (*hostContainer)(nil)
