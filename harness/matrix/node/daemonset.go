package node

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"path/filepath"
	"sort"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/paths"
)

// What an external plugin sees, as HAMi's chart mounts it into its device-plugin DaemonSet: the
// kubelet's device-plugins directory, HOOK_PATH=/usr/local with the library directory at
// /usr/local/vgpu, the node's /tmp (with /tmp/vgpulock, and /tmp/hami for MIG's lock file), the
// node configuration directory at /config, the device ConfigMap at /device-config.yaml and the
// host's /usr/bin at /usrbin.
const (
	DaemonSetPluginDir    = "/var/lib/kubelet/device-plugins"
	DaemonSetHookPath     = "/usr/local"
	DaemonSetConfigDir    = "/config"
	DaemonSetDeviceConfig = "/device-config.yaml"
	DaemonSetLockDir      = "/tmp/vgpulock"
)

// daemonSet is the private mount namespace an external plugin runs in (the host backend's
// container: an overlay of / in its own mount namespace, sandbox.NewHost) and the mounts that make
// it look like the plugin's DaemonSet pod on this node.
type daemonSet struct {
	ctr    sandbox.Container
	mounts []sandbox.Mount // ContainerPath: the plugin's view; HostPath: the node's file
}

// daemonSetMounts lists the bind mounts (the host backend mounts parents first): the node's own
// /tmp and what lies below it, the chart's volumes, and the harness's files at their own paths (the
// node directory, fakegpu, the binary) so that placeholders naming them stay valid inside.
func (n *Node) daemonSetMounts(dpDir, cfgDir string) []sandbox.Mount {
	m := []sandbox.Mount{
		{HostPath: filepath.Join(n.cfg.Dir, "tmp"), ContainerPath: "/tmp"},
		{HostPath: n.cfg.Dir, ContainerPath: n.cfg.Dir},
		{HostPath: filepath.Join(n.cfg.Dir, "vgpulock"), ContainerPath: DaemonSetLockDir},
		{HostPath: dpDir, ContainerPath: DaemonSetPluginDir},
		{HostPath: paths.VGPUDir(n.HookPath), ContainerPath: paths.VGPUDir(DaemonSetHookPath)},
		{HostPath: cfgDir, ContainerPath: DaemonSetConfigDir},
		{HostPath: filepath.Join(cfgDir, "device-config.yaml"), ContainerPath: DaemonSetDeviceConfig, ReadOnly: true},
		// the chart's usrbin volume (HAMi's plugin runs /usrbin/nvidia-ctk for CDI specs); /var/run/cdi
		// is the namespace's own /run
		{HostPath: "/usr/bin", ContainerPath: "/usrbin", ReadOnly: true},
	}
	for _, p := range []string{n.cfg.Artifacts.Lib, n.cfg.GPUProfile, n.cfg.External.Path} {
		if abs, err := filepath.Abs(p); err == nil {
			m = append(m, sandbox.Mount{HostPath: abs, ContainerPath: abs, ReadOnly: true})
		}
	}
	return m
}

// startDaemonSet builds the namespace; it needs root (mount namespaces, bind mounts).
func startDaemonSet(ctx context.Context, logger *slog.Logger, name string, mounts []sandbox.Mount) (*daemonSet, error) {
	b := sandbox.NewHost(logger, "")
	if err := b.Available(ctx); err != nil {
		return nil, fmt.Errorf("node: an external plugin runs as its DaemonSet runs it, with %s in a private mount "+
			"namespace: %w (run as root, or leave out the plugin binary to use the in-process plugin)", DaemonSetPluginDir, err)
	}
	ctr, err := b.Start(ctx, sandbox.ContainerSpec{Name: name, Mounts: mounts})
	if err != nil {
		return nil, fmt.Errorf("node: plugin namespace: %w", err)
	}
	return &daemonSet{ctr: ctr, mounts: mounts}, nil
}

// hostPath maps a path as the plugin sees it to the node's file: through the deepest mount that
// holds it; a path outside every mount is the host's own (the namespace's root is an overlay of /).
// A real node needs no such mapping because the chart mounts host paths at the same paths; here the
// node's "host" paths live in the node's directory.
func (d *daemonSet) hostPath(p string) string {
	p = path.Clean(p)
	best := -1
	for i, m := range d.mounts {
		if p == m.ContainerPath || strings.HasPrefix(p, strings.TrimSuffix(m.ContainerPath, "/")+"/") {
			if best < 0 || len(m.ContainerPath) > len(d.mounts[best].ContainerPath) {
				best = i
			}
		}
	}
	if best < 0 {
		return p
	}
	m := d.mounts[best]
	return filepath.Join(m.HostPath, strings.TrimPrefix(p, m.ContainerPath))
}

// translate rewrites the host side of the response's mounts and device specs to the node's files.
func (d *daemonSet) translate(resp *pluginapi.ContainerAllocateResponse) {
	for _, m := range resp.GetMounts() {
		m.HostPath = d.hostPath(m.HostPath)
	}
	for _, dev := range resp.GetDevices() {
		dev.HostPath = d.hostPath(dev.HostPath)
	}
}

func (d *daemonSet) spawner() (sandbox.Spawner, error) {
	s, ok := d.ctr.(sandbox.Spawner)
	if !ok {
		return nil, fmt.Errorf("node: the %s backend cannot start a process in a container", d.ctr.Backend())
	}
	return s, nil
}

func (d *daemonSet) stop(ctx context.Context) error { return d.ctr.Stop(ctx) }

// mountTable describes the mounts for logs and docs: "plugin path <- node path", sorted.
func (d *daemonSet) mountTable() []string {
	var out []string
	for _, m := range d.mounts {
		out = append(out, m.ContainerPath+" <- "+m.HostPath)
	}
	sort.Strings(out)
	return out
}
