package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/deviceplugin/fakekubelet"
)

// ExternalPlugin is a device plugin binary the node runs instead of the in-process plugin, driven
// as its DaemonSet would drive it: on the node, with the kubelet's device-plugins directory (the
// fake kubelet's), a kubeconfig for the API server (harness/fakeapi, seeded with the node and the
// pods the scheduler bound), HOOK_PATH, and fakegpu as the driver.
//
// The binary inherits the harness's environment plus NODE_NAME, KUBECONFIG, HOOK_PATH, KUBELET_SOCKET,
// fakegpu's variables (FAKEGPU_PROFILE, FAKEGPU_STATE_DIR, LD_LIBRARY_PATH with fakegpu's
// libnvidia-ml.so.1) and every flag's environment twin of limitbed's vgpu-device-plugin, so
// limitbed's binary needs no arguments; KUBERNETES_SERVICE_HOST is cleared so that no in-cluster
// configuration wins over the kubeconfig. Another plugin (upstream HAMi's has other flags) gets its own flags through Args, with
// placeholders expanded (see Placeholders).
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
	{"kubeconfig", "kubeconfig file for the fake API server"},
	{"apiserver", "URL of the fake API server"},
	{"socketdir", "the kubelet's device-plugins directory (kubelet.sock and the plugin's socket)"},
	{"kubeletsocket", "the kubelet registration socket, {socketdir}/kubelet.sock"},
	{"socketname", "the plugin socket name limitbed's plugin is given"},
	{"hookpath", "HOOK_PATH (vgpu/libvgpu.so, vgpu/ld.so.preload, vgpu/containers under it)"},
	{"lockdir", "host directory for /tmp/vgpulock"},
	{"nvml", "fakegpu's libnvidia-ml.so.1"},
	{"fakelibdir", "directory of fakegpu's libcuda.so.1 and libnvidia-ml.so.1"},
	{"gpuprofile", "the fakegpu profile"},
	{"statedir", "fakegpu's shared device state directory"},
	{"deviceconfig", "device-config.yaml (nvidia: resourceCountName, deviceSplitCount, limitDelivery)"},
	{"nodeconfig", "config.json (per-node operating mode)"},
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

// writeConfigs writes device-config.yaml and config.json as HAMi's ConfigMaps would hold them.
func (n *Node) writeConfigs(dir string) (devCfg, nodeCfg string, err error) {
	res, split := ResourceName, n.cfg.SplitCount
	dc := v1.DeviceConfig{Version: v1.Version, Nvidia: &v1.NvidiaConfig{ResourceCountName: &res}}
	dc.Nvidia.DeviceSplitCount = &split
	if n.cfg.Delivery != "" {
		d := n.cfg.Delivery
		dc.Nvidia.LimitDelivery = &d
	}
	if n.cfg.AllowPodEnv {
		allow := true
		dc.Nvidia.AllowPodLimitDeliveryOverride = &allow
	}
	pc := v1.PluginConfig{Version: v1.Version}
	if n.cfg.MIG {
		mig := v1.OperatingModeMIG
		pc.NodeConfig = []v1.NodeConfig{{Name: Name, OperatingMode: &mig}}
	}
	devCfg, nodeCfg = filepath.Join(dir, "device-config.yaml"), filepath.Join(dir, "config.json")
	for path, v := range map[string]any{devCfg: dc, nodeCfg: pc} {
		data, err := json.MarshalIndent(v, "", "  ") // JSON is YAML
		if err != nil {
			return "", "", err
		}
		if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			return "", "", fmt.Errorf("node: write %s: %w", path, err)
		}
	}
	return devCfg, nodeCfg, nil
}

// startExternal runs cfg.External against the fake kubelet k and the fake API server.
func (n *Node) startExternal(ctx context.Context, k *fakekubelet.Kubelet, dpDir string) error {
	ext := n.cfg.External
	if n.cfg.FS != nil {
		return errors.New("node: fault injection (FS) needs the in-process plugin, not an external binary")
	}
	cfgDir := filepath.Join(n.cfg.Dir, "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return fmt.Errorf("node: config dir: %w", err)
	}
	kubeconfig := filepath.Join(cfgDir, "kubeconfig")
	if err := n.api.WriteKubeconfig(kubeconfig); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	devCfg, nodeCfg, err := n.writeConfigs(cfgDir)
	if err != nil {
		return err
	}
	vals := map[string]string{
		"node": Name, "kubeconfig": kubeconfig, "apiserver": n.api.URL, "socketdir": dpDir, "kubeletsocket": k.Socket,
		"socketname": pluginSocket, "hookpath": n.HookPath, "lockdir": filepath.Join(n.cfg.Dir, "vgpulock"),
		"nvml": filepath.Join(n.cfg.Artifacts.Lib, "libnvidia-ml.so.1"), "fakelibdir": n.cfg.Artifacts.Lib,
		"gpuprofile": n.cfg.GPUProfile, "statedir": n.StateDir, "deviceconfig": devCfg, "nodeconfig": nodeCfg,
		"splitcount": strconv.FormatUint(uint64(n.cfg.SplitCount), 10), "resource": ResourceName,
		"delivery": string(n.cfg.Delivery),
	}
	args := make([]string, 0, len(ext.Args))
	for _, a := range ext.Args {
		x, err := expand(a, vals)
		if err != nil {
			return fmt.Errorf("node: plugin argument %q: %w", a, err)
		}
		args = append(args, x)
	}
	env := append(os.Environ(),
		// what the DaemonSet sets for every plugin
		"NODE_NAME="+Name, "KUBECONFIG="+kubeconfig, "HOOK_PATH="+n.HookPath,
		// never the cluster the harness itself may run in: client-go (and HAMi's client) try the
		// in-cluster config first
		"KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT=",
		// limitbed's vgpu-device-plugin flags, by their environment twins
		"DEVICE_PLUGIN_DIR="+dpDir, "KUBELET_SOCKET="+k.Socket, "SOCKET_NAME="+pluginSocket,
		"DEVICE_CONFIG_FILE="+devCfg, "NODE_CONFIG_FILE="+nodeCfg, "VGPU_LOCK_DIR="+vals["lockdir"],
		"NVML_LIBRARY="+vals["nvml"], "FAKE_DRIVER=true", "FAKE_DRIVER_LIB_DIR="+n.cfg.Artifacts.Lib,
		"FAKE_DRIVER_PROFILE="+n.cfg.GPUProfile, "FAKE_DRIVER_STATE_DIR="+n.StateDir,
		// fakegpu's own NVML, for plugins that load libnvidia-ml.so.1 by name
		"FAKEGPU_PROFILE="+n.cfg.GPUProfile, "FAKEGPU_STATE_DIR="+n.StateDir,
		"LD_LIBRARY_PATH="+joinPath(n.cfg.Artifacts.Lib, os.Getenv("LD_LIBRARY_PATH")),
	)
	for _, e := range ext.Env {
		x, err := expand(e, vals)
		if err != nil {
			return fmt.Errorf("node: plugin environment %q: %w", e, err)
		}
		env = append(env, x)
	}
	logPath := filepath.Join(n.cfg.Dir, "plugin.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("node: plugin log: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cmd := exec.CommandContext(runCtx, ext.Path, args...)
	cmd.Env = env
	cmd.Dir = n.cfg.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a wrapper script (e.g. one entering a mount namespace) stops with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		logf.Close()
		return fmt.Errorf("node: start plugin %s: %w", ext.Path, err)
	}
	n.cfg.Logger.Info("external device plugin started", "pid", cmd.Process.Pid, "cmd", ext.Path, "args", args, "log", logPath)
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
	out := filepath.Join(dir, "vgpu-device-plugin")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./plugin/cmd/vgpu-device-plugin")
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build vgpu-device-plugin: %w\n%s", err, msg)
	}
	return out, nil
}
