package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/limitbed/limitbed/harness/fakeapi"
	"github.com/limitbed/limitbed/harness/sandbox"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/deviceplugin/fakekubelet"
)

// ExternalPlugin is a device plugin binary the node runs instead of the in-process plugin, driven
// as its DaemonSet would drive it: as root in a private mount namespace laid out as HAMi's chart
// lays out the plugin's pod (DaemonSetPluginDir is the fake kubelet's directory, HOOK_PATH=/usr/local
// with the node's vgpu directory, the node's /tmp with /tmp/vgpulock, /config/config.json and
// /device-config.yaml, see daemonSetMounts), a kubeconfig for the API server (harness/fakeapi,
// seeded with the node; the harness plays the scheduler on it, harness/scheduler), and fakegpu as
// the driver. The device config is a complete HAMi-format ConfigMap (hamiDeviceConfig).
//
// The binary gets a clean environment: PATH, HOME, NODE_NAME, KUBECONFIG, HOOK_PATH,
// KUBELET_SOCKET, fakegpu's variables (FAKEGPU_PROFILE, FAKEGPU_STATE_DIR, LD_LIBRARY_PATH with
// fakegpu's libnvidia-ml.so.1) and every flag's environment twin of limitbed's vgpu-device-plugin,
// so limitbed's binary needs no arguments. Another plugin (upstream HAMi's has other flags) gets its
// own flags through Args, with placeholders expanded (see Placeholders); paths expand to what the
// plugin sees inside its namespace.
type ExternalPlugin struct {
	// Path of the binary (or of a wrapper script).
	Path string
	// Args are the binary's arguments; each may hold placeholders such as {kubeconfig}.
	Args []string
	// Env are extra KEY=VALUE entries (placeholders expanded), after the node's own.
	Env []string
}

// String describes the plugin for reports: the path and the argument template.
func (e ExternalPlugin) String() string {
	if len(e.Args) == 0 {
		return e.Path
	}
	return e.Path + " " + strings.Join(e.Args, " ")
}

// Placeholders lists what {name} in ExternalPlugin.Args and Env expands to, with a description.
var Placeholders = [][2]string{
	{"node", "the node name (NODE_NAME)"},
	{"kubeconfig", "kubeconfig file for the fake API server, /config/kubeconfig"},
	{"apiserver", "URL of the fake API server"},
	{"socketdir", "the kubelet's device-plugins directory, /var/lib/kubelet/device-plugins (the fake kubelet's)"},
	{"kubeletsocket", "the kubelet registration socket, {socketdir}/kubelet.sock"},
	{"socketname", "the plugin socket name limitbed's plugin is given"},
	{"hookpath", "HOOK_PATH, /usr/local (vgpu/libvgpu.so, vgpu/ld.so.preload, vgpu/containers under it)"},
	{"lockdir", "/tmp/vgpulock (the node's)"},
	{"nvml", "fakegpu's libnvidia-ml.so.1"},
	{"fakelibdir", "directory of fakegpu's libcuda.so.1 and libnvidia-ml.so.1"},
	{"gpuprofile", "the fakegpu profile"},
	{"statedir", "fakegpu's shared device state directory"},
	{"deviceconfig", "/device-config.yaml, HAMi's device ConfigMap with the node's split count and limitDelivery"},
	{"nodeconfig", "/config/config.json (per-node operating mode)"},
	{"splitcount", "virtual devices per GPU"},
	{"resource", "the resource name, nvidia.com/gpu"},
	{"delivery", "the combination's limitDelivery (file or env; empty for the default)"},
}

// expand replaces {name} placeholders from vals; an unknown placeholder is an error so that a typo
// does not reach the binary.
func expand(s string, vals map[string]string) (string, error) {
	var out strings.Builder
	for {
		i := strings.IndexByte(s, '{')
		if i < 0 {
			out.WriteString(s)
			return out.String(), nil
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			out.WriteString(s)
			return out.String(), nil
		}
		name := s[i+1 : i+j]
		v, ok := vals[name]
		if !ok {
			return "", fmt.Errorf("unknown placeholder {%s} (known: %s)", name, placeholderNames())
		}
		out.WriteString(s[:i])
		out.WriteString(v)
		s = s[i+j+1:]
	}
}

func placeholderNames() string {
	var n []string
	for _, p := range Placeholders {
		n = append(n, "{"+p[0]+"}")
	}
	return strings.Join(n, " ")
}

// CheckArgs reports an unknown placeholder in args before any node starts.
func CheckArgs(args []string) error {
	vals := map[string]string{}
	for _, p := range Placeholders {
		vals[p[0]] = ""
	}
	for _, a := range args {
		if _, err := expand(a, vals); err != nil {
			return fmt.Errorf("argument %q: %w", a, err)
		}
	}
	return nil
}

// startAPI starts the fake API server with the node object and a client for the harness.
func (n *Node) startAPI() error {
	api, err := fakeapi.Start()
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.api = api
	if err := api.AddNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: Name}}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	kube, err := kubernetes.NewForConfig(api.RESTConfig())
	if err != nil {
		return fmt.Errorf("node: API client: %w", err)
	}
	n.kube = kube
	return nil
}

// writeConfigs writes device-config.yaml (HAMi's device ConfigMap) and config.json (the node
// configuration ConfigMap, {"nodeconfig":[...]}) as HAMi's chart holds them.
func (n *Node) writeConfigs(dir string) (devCfg, nodeCfg string, err error) {
	dc, err := hamiDeviceConfig(hamiConfigValues{Resource: ResourceName, SplitCount: n.cfg.SplitCount,
		LimitDelivery: string(n.cfg.Delivery), AllowPodEnv: n.cfg.AllowPodEnv})
	if err != nil {
		return "", "", err
	}
	pc := v1.PluginConfig{Version: v1.Version}
	if n.cfg.MIG {
		mig := v1.OperatingModeMIG
		pc.NodeConfig = []v1.NodeConfig{{Name: Name, OperatingMode: &mig}}
	}
	nc, err := json.MarshalIndent(pc, "", "  ")
	if err != nil {
		return "", "", err
	}
	devCfg, nodeCfg = filepath.Join(dir, "device-config.yaml"), filepath.Join(dir, "config.json")
	for path, data := range map[string][]byte{devCfg: dc, nodeCfg: append(nc, '\n')} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return "", "", fmt.Errorf("node: write %s: %w", path, err)
		}
	}
	return devCfg, nodeCfg, nil
}

// startExternal runs cfg.External in its DaemonSet namespace against the fake kubelet k and the
// fake API server.
func (n *Node) startExternal(ctx context.Context, k *fakekubelet.Kubelet, dpDir string) error {
	ext := *n.cfg.External
	if n.cfg.FS != nil {
		return errors.New("node: fault injection (FS) needs the in-process plugin, not an external binary")
	}
	bin, err := filepath.Abs(ext.Path)
	if err != nil {
		return fmt.Errorf("node: plugin %s: %w", ext.Path, err)
	}
	cfgDir := filepath.Join(n.cfg.Dir, "config")
	if err := n.prepareExternal(cfgDir); err != nil {
		return err
	}
	ds, err := startDaemonSet(ctx, n.cfg.Logger, "plugin-"+filepath.Base(n.cfg.Dir), n.daemonSetMounts(dpDir, cfgDir))
	if err != nil {
		return err
	}
	n.ds = ds
	spawner, err := ds.spawner()
	if err != nil {
		return err
	}
	args, env, err := n.externalCommand(bin, ext)
	if err != nil {
		return err
	}
	return n.spawnExternal(ctx, spawner, ext, args, env)
}

// prepareExternal lays out what the DaemonSet mounts: the config directory with the kubeconfig
// and HAMi's two ConfigMaps, /tmp (sticky, as a node's) and the lock directory.
func (n *Node) prepareExternal(cfgDir string) error {
	for _, d := range []string{cfgDir, filepath.Join(n.cfg.Dir, "tmp", "hami"), filepath.Join(n.cfg.Dir, "vgpulock")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	if err := os.Chmod(filepath.Join(n.cfg.Dir, "tmp"), 0o1777); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := n.api.WriteKubeconfig(filepath.Join(cfgDir, "kubeconfig")); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	_, _, err := n.writeConfigs(cfgDir)
	return err
}

// externalCommand is the plugin's command line and environment: what the chart's DaemonSet
// sets, limitbed's flags by their environment twins, fakegpu's own, then the plugin's own
// arguments and variables with their placeholders expanded.
func (n *Node) externalCommand(bin string, ext ExternalPlugin) ([]string, map[string]string, error) {
	lib := n.cfg.Artifacts.Lib
	kubeletSocket := path.Join(DaemonSetPluginDir, fakekubelet.SocketName)
	vals := map[string]string{
		"node": Name, "kubeconfig": path.Join(DaemonSetConfigDir, "kubeconfig"), "apiserver": n.api.URL,
		"socketdir": DaemonSetPluginDir, "kubeletsocket": kubeletSocket, "socketname": pluginSocket,
		"hookpath": DaemonSetHookPath, "lockdir": DaemonSetLockDir,
		"nvml": filepath.Join(lib, "libnvidia-ml.so.1"), "fakelibdir": lib,
		"gpuprofile": n.cfg.GPUProfile, "statedir": n.StateDir, "deviceconfig": DaemonSetDeviceConfig,
		"nodeconfig": path.Join(DaemonSetConfigDir, "config.json"),
		"splitcount": strconv.FormatUint(uint64(n.cfg.SplitCount), 10), "resource": ResourceName,
		"delivery": string(n.cfg.Delivery),
	}
	args := []string{bin}
	for _, a := range ext.Args {
		x, err := expand(a, vals)
		if err != nil {
			return nil, nil, fmt.Errorf("node: plugin argument %q: %w", a, err)
		}
		args = append(args, x)
	}
	env := map[string]string{
		// what the chart's DaemonSet sets for the plugin
		"NODE_NAME": Name, "KUBECONFIG": vals["kubeconfig"], "HOOK_PATH": DaemonSetHookPath,
		// limitbed's vgpu-device-plugin flags, by their environment twins
		"DEVICE_PLUGIN_DIR": DaemonSetPluginDir, "KUBELET_SOCKET": kubeletSocket, "SOCKET_NAME": pluginSocket,
		"DEVICE_CONFIG_FILE": DaemonSetDeviceConfig, "NODE_CONFIG_FILE": vals["nodeconfig"], "VGPU_LOCK_DIR": DaemonSetLockDir,
		"NVML_LIBRARY": vals["nvml"], "FAKE_DRIVER": "true", "FAKE_DRIVER_LIB_DIR": lib,
		"FAKE_DRIVER_PROFILE": n.cfg.GPUProfile, "FAKE_DRIVER_STATE_DIR": n.StateDir,
		// fakegpu's own NVML, for plugins that load libnvidia-ml.so.1 by name
		"FAKEGPU_PROFILE": n.cfg.GPUProfile, "FAKEGPU_STATE_DIR": n.StateDir, "LD_LIBRARY_PATH": lib,
	}
	for _, e := range ext.Env {
		x, err := expand(e, vals)
		if err != nil {
			return nil, nil, fmt.Errorf("node: plugin environment %q: %w", e, err)
		}
		k, v, ok := strings.Cut(x, "=")
		if !ok {
			return nil, nil, fmt.Errorf("node: plugin environment %q: want KEY=VALUE", e)
		}
		env[k] = v
	}
	return args, env, nil
}

// spawnExternal starts the plugin in the DaemonSet's namespace, its output to plugin.log, and
// watches it: Close cancels it, an exit of its own is logged as an error.
func (n *Node) spawnExternal(ctx context.Context, spawner sandbox.Spawner, ext ExternalPlugin, args []string, env map[string]string) error {
	logPath := filepath.Join(n.cfg.Dir, "plugin.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("node: plugin log: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cmd, err := spawner.Spawn(runCtx, args, sandbox.ExecOptions{Env: env})
	if err != nil {
		cancel()
		logf.Close()
		return fmt.Errorf("node: plugin %s: %w", ext.Path, err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a wrapper script stops with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		logf.Close()
		return fmt.Errorf("node: start plugin %s: %w", ext.Path, err)
	}
	n.cfg.Logger.Info("external device plugin started", "pid", cmd.Process.Pid, "cmd", ext.Path, "args", args[1:],
		"log", logPath, "mounts", n.ds.mountTable())
	n.cancel, n.done, n.exited = cancel, make(chan struct{}), make(chan struct{})
	go func() {
		defer close(n.done)
		err := cmd.Wait()
		n.exitErr = err
		close(n.exited)
		logf.Close()
		if runCtx.Err() == nil {
			n.cfg.Logger.Error("external device plugin exited", "err", err, "log", logPath)
		}
	}()
	return nil
}

const pluginSocket = "limitbed-gpu.sock"

func joinPath(a, b string) string {
	if b == "" {
		return a
	}
	return a + ":" + b
}

// pluginLogTail is the end of the external plugin's output, for error messages.
func (n *Node) pluginLogTail() string {
	if n.cfg.External == nil {
		return ""
	}
	data, _ := os.ReadFile(filepath.Join(n.cfg.Dir, "plugin.log"))
	data = bytes.TrimSpace(data)
	const max = 2000
	if len(data) > max {
		data = data[len(data)-max:]
	}
	if len(data) == 0 {
		return " (plugin output: none)"
	}
	return fmt.Sprintf(" (plugin output, last %d bytes:\n%s)", len(data), data)
}

// Requests returns what the external plugin asked the fake API server ("METHOD PATH?QUERY STATUS",
// sorted); nil for the in-process plugin.
func (n *Node) Requests() []string {
	if n.api == nil {
		return nil
	}
	r := n.api.Requests()
	sort.Strings(r)
	return r
}

// BuildPluginBinary builds limitbed's vgpu-device-plugin with `go build` into dir and returns its
// path: the stand-in for an old release's binary in tests of the external-plugin path.
func BuildPluginBinary(ctx context.Context, root, dir string) (string, error) {
	return BuildBinary(ctx, root, dir, "vgpu-device-plugin")
}

// BuildBinary builds limitbed's command plugin/cmd/<name> with `go build` into dir and returns its
// path.
func BuildBinary(ctx context.Context, root, dir, name string) (string, error) {
	out := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./plugin/cmd/"+name)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", name, err, msg)
	}
	return out, nil
}
