package doctor

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"

	"github.com/limitbed/limitbed/plugin/paths"
)

// The chart's names (deployments/helm/limitbed): the ConfigMap keys and the DaemonSet's containers.
const (
	deviceConfigKey    = "device-config.yaml"
	nodeConfigKey      = "config.json"
	pluginContainer    = "device-plugin"
	monitorContainer   = "vgpu-monitor"
	defaultHookPath    = "/usr/local"
	defaultMetricsPort = "9394"
	hookPathFlag       = "--hook-path="
	metricsAddressFlag = "--metrics-address="
)

// pluginConfig is the configuration the chart gave the plugin, and where it was read.
type pluginConfig struct {
	device *v1.DeviceConfig
	node   *v1.PluginConfig
	from   string // "configmap NS/NAME", or "" when none was found
}

// loadPluginConfig reads the chart's ConfigMap (the one carrying device-config.yaml) in ns.
func loadPluginConfig(ctx context.Context, c Cluster, ns string) (pluginConfig, error) {
	list, err := c.Kube().CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return pluginConfig{}, fmt.Errorf("list ConfigMaps in %s: %w", ns, err)
	}
	for _, cm := range list.Items {
		raw, ok := cm.Data[deviceConfigKey]
		if !ok {
			continue
		}
		from := "configmap " + ns + "/" + cm.Name
		dc, err := v1.ParseDeviceConfig([]byte(raw), logr.Discard())
		if err != nil {
			return pluginConfig{}, fmt.Errorf("%s key %s: %w", from, deviceConfigKey, err)
		}
		pc := &v1.PluginConfig{}
		if nraw := strings.TrimSpace(cm.Data[nodeConfigKey]); nraw != "" {
			if pc, err = v1.ParsePluginConfig([]byte(nraw), logr.Discard()); err != nil {
				return pluginConfig{}, fmt.Errorf("%s key %s: %w", from, nodeConfigKey, err)
			}
		}
		return pluginConfig{device: dc, node: pc, from: from}, nil
	}
	return pluginConfig{}, nil
}

// pluginPod is the chart's DaemonSet pod on a node.
type pluginPod struct {
	pod         *corev1.Pod
	hookPath    string
	metricsPort string
}

func (p pluginPod) vgpuDir() string { return paths.VGPUDir(p.hookPath) }

// findPluginPod returns the pod in ns on node that runs the device-plugin container.
func findPluginPod(ctx context.Context, c Cluster, ns, node string) (pluginPod, error) {
	list, err := c.Kube().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return pluginPod{}, fmt.Errorf("list pods in %s on node %s: %w", ns, node, err)
	}
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName != node || p.DeletionTimestamp != nil {
			continue
		}
		for _, ctr := range p.Spec.Containers {
			if ctr.Name != pluginContainer {
				continue
			}
			pp := pluginPod{pod: p, hookPath: flagValue(ctr, hookPathFlag, defaultHookPath), metricsPort: defaultMetricsPort}
			for _, m := range p.Spec.Containers {
				if m.Name == monitorContainer {
					addr := flagValue(m, metricsAddressFlag, ":"+defaultMetricsPort)
					if i := strings.LastIndex(addr, ":"); i >= 0 && i+1 < len(addr) {
						pp.metricsPort = addr[i+1:]
					}
				}
			}
			return pp, nil
		}
	}
	return pluginPod{}, fmt.Errorf("no pod in namespace %s on node %s runs a %q container", ns, node, pluginContainer)
}

func flagValue(c corev1.Container, prefix, def string) string {
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		if v, ok := strings.CutPrefix(a, prefix); ok {
			return v
		}
	}
	return def
}

func podReady(p *corev1.Pod, container string) bool {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container {
			return s.Ready
		}
	}
	return false
}
