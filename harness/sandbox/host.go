package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// containerPATH is the PATH a container runtime gives a process when the image sets none.
const containerPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// hostSharedDirs are bind-mounted from the host into every host-backend container; a spec mount
// below them would have to create its mount point on the host, so it is refused.
var hostSharedDirs = []struct {
	dir       string
	recursive bool
}{
	{"/proc", false},
	{"/dev", true},
	{"/sys", true},
}

// privateDirs get a tmpfs of their own in each host-backend container, as a container runtime
// gives them: mounts such as /tmp/vgpulock or /run/fakegpu get their mount points inside the
// container, and nothing one container leaves there is seen by another or by the host.
var privateDirs = []struct{ dir, mode string }{
	{"/tmp", "1777"},
	{"/run", "0755"},
}

// NewHost returns the host backend: each container is a private mount namespace on this machine,
// kept alive by a holder process (`unshare --mount --propagation private sleep infinity`), whose
// processes chroot into an overlay of / with its upper layer on a tmpfs. /proc, /dev and /sys are the
// host's, /tmp and /run are tmpfs of its own; the spec's mounts are bound on top, read-only where asked. Mount points are
// created in the overlay's upper layer, never in the host's / or /etc, and vanish with the namespace.
// stateDir holds one empty directory per container (the tmpfs is mounted over it inside the
// namespace only); empty means /run/limitbed/host. It needs root.
func NewHost(logger *slog.Logger, stateDir string) Backend {
	if stateDir == "" {
		stateDir = "/run/limitbed/host"
	}
	return &hostBackend{logger: logger.With("backend", "host"), stateDir: stateDir}
}

type hostBackend struct {
	logger   *slog.Logger
	stateDir string
}

var _ Backend = (*hostBackend)(nil)

func (b *hostBackend) Name() string { return "host" }

// Supports: no sshd and no cron daemon run in a host-backend container.
func (b *hostBackend) Supports(Feature) bool { return false }

func (b *hostBackend) Available(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return Unavailable("host", "needs root for mount namespaces (running as uid %d)", os.Geteuid())
	}
	for _, tool := range []string{"unshare", "nsenter", "chroot", "mount", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			return Unavailable("host", "%s not found (util-linux, coreutils)", tool)
		}
	}
	out, err := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "true").CombinedOutput()
	if err != nil {
		return Unavailable("host", "unshare --mount fails: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

func (b *hostBackend) Start(ctx context.Context, spec ContainerSpec) (Container, error) {
	if err := os.MkdirAll(b.stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("host: state dir: %w", err)
	}
	name := spec.Name
	if name == "" {
		name = "ctr"
	}
	state, err := os.MkdirTemp(b.stateDir, filepath.Base(name)+"-")
	if err != nil {
		return nil, fmt.Errorf("host: state dir: %w", err)
	}
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sleep", "infinity")
	var holderOut bytes.Buffer
	holder.Stdout, holder.Stderr = &holderOut, &holderOut
	if err := holder.Start(); err != nil {
		_ = os.Remove(state)
		return nil, fmt.Errorf("host: start namespace holder: %w", err)
	}
	c := &hostContainer{
		logger: b.logger.With("container", name),
		spec:   spec,
		state:  state,
		root:   filepath.Join(state, "root"),
		holder: holder,
		waited: make(chan struct{}),
	}
	go func() { _ = holder.Wait(); close(c.waited) }()
	if err := c.setup(ctx); err != nil {
		stopErr := c.Stop(ctx)
		return nil, errors.Join(fmt.Errorf("host: container %s: %w", name, err), stopErr)
	}
	return c, nil
}

type hostContainer struct {
	logger *slog.Logger
	spec   ContainerSpec
	state  string // empty directory on the host; a tmpfs over it inside the namespace
	root   string // state/root: the overlay the container's processes chroot into
	holder *exec.Cmd
	waited chan struct{}
	mntNS  string // the holder's /proc/<pid>/ns/mnt link, "mnt:[inode]"

	mu  sync.Mutex
	log bytes.Buffer // setup commands and their output: what Logs returns

	stopOnce sync.Once
	stopErr  error
}

var _ Container = (*hostContainer)(nil)

func (c *hostContainer) Backend() string       { return "host" }
func (c *hostContainer) Addr() string          { return "" }
func (c *hostContainer) Supports(Feature) bool { return false } // no sshd, no cron daemon

func (c *hostContainer) pid() int { return c.holder.Process.Pid }

// setup waits for the holder to enter its namespace, then builds the container's filesystem in it.
func (c *hostContainer) setup(ctx context.Context) error {
	if err := c.waitNamespace(ctx); err != nil {
		return err
	}
	steps := [][]string{
		{"mount", "-t", "tmpfs", "-o", "mode=0755", "limitbed-overlay", c.state},
		{"mkdir", "-p", c.state + "/upper", c.state + "/work", c.root},
		{"mount", "-t", "overlay", "overlay", "-o",
			"lowerdir=/,upperdir=" + c.state + "/upper,workdir=" + c.state + "/work", c.root},
	}
	for _, d := range hostSharedDirs {
		bind := "--bind"
		if d.recursive {
			bind = "--rbind"
		}
		steps = append(steps, []string{"mount", bind, d.dir, c.root + d.dir})
	}
	for _, d := range privateDirs {
		steps = append(steps, []string{"mount", "-t", "tmpfs", "-o", "mode=" + d.mode + ",nosuid,nodev", "limitbed" + strings.ReplaceAll(d.dir, "/", "-"), c.root + d.dir})
	}
	for _, s := range steps {
		if err := c.nsRun(ctx, s...); err != nil {
			return err
		}
	}
	for _, m := range mountOrder(c.spec.Mounts) {
		if err := c.bind(ctx, m); err != nil {
			return err
		}
	}
	for _, d := range c.spec.Devices {
		if d.HostPath != d.ContainerPath {
			return fmt.Errorf("%w: host backend: device %s cannot appear as %s (the host's /dev is shared)", ErrUnsupported, d.HostPath, d.ContainerPath)
		}
		if _, err := os.Stat(d.HostPath); err != nil {
			return fmt.Errorf("device %s: %w", d.HostPath, err)
		}
	}
	return c.ensureTenant(ctx)
}

func (c *hostContainer) waitNamespace(ctx context.Context) error {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("read own mount namespace: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", c.pid()))
		if err == nil && ns != self {
			c.mntNS = ns
			return nil
		}
		select {
		case <-c.waited:
			return fmt.Errorf("namespace holder exited early")
		case <-ctx.Done():
			return fmt.Errorf("wait for mount namespace: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("holder %d did not enter a new mount namespace within 10s", c.pid())
		}
	}
}

// mountOrder sorts mounts parents first, as container runtimes do (by the number of components in
// the container path; stable otherwise), so /usr/local/vgpu/libvgpu.so stays visible when the
// directory /usr/local/vgpu is mounted too, whatever order the device plugin listed them in.
func mountOrder(ms []Mount) []Mount {
	out := slices.Clone(ms)
	depth := func(p string) int { return strings.Count(path.Clean(p), "/") }
	slices.SortStableFunc(out, func(a, b Mount) int { return depth(a.ContainerPath) - depth(b.ContainerPath) })
	return out
}

// bind mounts one spec mount; the mount point is created inside the overlay (its upper layer).
func (c *hostContainer) bind(ctx context.Context, m Mount) error {
	target, err := c.containerPath(m.ContainerPath)
	if err != nil {
		return err
	}
	st, err := os.Stat(m.HostPath)
	if err != nil {
		return fmt.Errorf("mount %s -> %s: %w", m.HostPath, m.ContainerPath, err)
	}
	if st.IsDir() {
		err = c.nsRun(ctx, "mkdir", "-p", target)
	} else {
		err = c.nsRun(ctx, "sh", "-c", `mkdir -p "$(dirname "$1")" && { [ -e "$1" ] || : >"$1"; }`, "mkpoint", target)
	}
	if err != nil {
		return fmt.Errorf("mount point %s: %w", m.ContainerPath, err)
	}
	if err := c.nsRun(ctx, "mount", "--bind", m.HostPath, target); err != nil {
		return err
	}
	if m.ReadOnly {
		return c.nsRun(ctx, "mount", "-o", "remount,bind,ro", target)
	}
	return nil
}

// containerPath maps an absolute container path into the overlay, refusing paths below the
// directories shared with the host.
func (c *hostContainer) containerPath(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("container path %q is not absolute", p)
	}
	clean := path.Clean(p)
	for _, d := range hostSharedDirs {
		if clean == d.dir || strings.HasPrefix(clean, d.dir+"/") {
			return "", fmt.Errorf("%w: host backend: mount at %s would create its mount point in the host's %s", ErrUnsupported, clean, d.dir)
		}
	}
	if clean == "/" {
		return "", fmt.Errorf("%w: host backend: mount over /", ErrUnsupported)
	}
	return c.root + clean, nil
}

// ensureTenant adds TenantUser (with passwordless sudo where sudo exists) to the overlay's
// /etc/passwd when the host has no such user, so that su/sudo/runuser launch methods work.
func (c *hostContainer) ensureTenant(ctx context.Context) error {
	script := `id -u "$1" >/dev/null 2>&1 && exit 0
command -v useradd >/dev/null || exit 0
uid=; getent passwd 1000 >/dev/null || uid="--uid 1000"
useradd $uid --user-group --create-home --shell /bin/bash "$1"
usermod -p '*' "$1"
if [ -d /etc/sudoers.d ]; then echo "$1 ALL=(ALL) NOPASSWD: ALL" >/etc/sudoers.d/"$1"; chmod 0440 /etc/sudoers.d/"$1"; fi`
	return c.nsRun(ctx, "chroot", c.root, "sh", "-c", script, "ensure-tenant", TenantUser)
}

// nsRun runs a setup command in the container's mount namespace (outside the chroot).
func (c *hostContainer) nsRun(ctx context.Context, args ...string) error {
	full := append([]string{"-t", fmt.Sprint(c.pid()), "-m", "--"}, args...)
	out, err := exec.CommandContext(ctx, "nsenter", full...).CombinedOutput()
	c.mu.Lock()
	fmt.Fprintf(&c.log, "+ %s\n%s", strings.Join(args, " "), out)
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func (c *hostContainer) Logs(context.Context) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.log.Bytes()), nil
}

func (c *hostContainer) ReadFile(ctx context.Context, p string) ([]byte, error) {
	res, err := c.Exec(ctx, []string{"cat", "--", p}, ExecOptions{})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("host: read %s: %s", p, bytes.TrimSpace(res.Stderr))
	}
	return res.Stdout, nil
}

// Stop kills every process in the container's mount namespace (so the namespace and its mounts go
// away) and removes the state directory.
func (c *hostContainer) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() {
		var errs []error
		if c.mntNS != "" {
			errs = append(errs, killNamespace(c.mntNS))
		}
		_ = c.holder.Process.Kill()
		select {
		case <-c.waited:
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("holder %d did not exit", c.pid()))
		}
		if err := os.Remove(c.state); err != nil && !os.IsNotExist(err) {
			errs = append(errs, fmt.Errorf("remove state dir: %w", err))
		}
		if err := errors.Join(errs...); err != nil {
			c.stopErr = fmt.Errorf("host: stop %s: %w", c.spec.Name, err)
		}
	})
	return c.stopErr
}

// killNamespace sends SIGKILL to every process whose mount namespace is ns.
func killNamespace(ns string) error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("list processes: %w", err)
	}
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && link == ns {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
	}
	return nil
}
