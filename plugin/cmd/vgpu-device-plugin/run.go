package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/allocate"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/delivery"
	"github.com/limitbed/limitbed/plugin/deviceplugin"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/pods"
)

// serve builds the plugin from o and runs it until ctx ends.
func serve(ctx context.Context, o options) error {
	logger := klog.FromContext(ctx)
	profile, err := allocate.ParseProfile(o.compatProfile)
	if err != nil {
		return fmt.Errorf("--compat-profile: %w", err)
	}
	dc, err := v1.LoadDeviceConfig(o.deviceConfigFile, logger)
	if err != nil {
		return err
	}
	pc, err := v1.LoadPluginConfig(o.nodeConfigFile, logger)
	if err != nil {
		return err
	}
	eff := v1.Resolve(dc, pc, o.nodeName)

	kube, err := kubeClient(o.kubeconfig)
	if err != nil {
		return err
	}
	recorder := eventRecorder(ctx, kube)

	aopts := allocate.Options{
		HookPath:         o.hookPath,
		LockDir:          o.lockDir,
		Profile:          profile,
		OperatingMode:    eff.OperatingMode,
		Oversubscribe:    eff.DeviceMemoryScaling > 1,
		LibCudaLogLevel:  eff.LibCudaLogLevel,
		DisableCoreLimit: eff.DisableCoreLimit,
		HostPIDBroker:    eff.HostPIDBroker,
		ComputeScheduler: o.computeScheduler,
	}
	if o.fakeDriver {
		aopts.FakeDriver = &allocate.FakeDriver{LibDir: o.fakeLibDir, ProfilePath: o.fakeProfile, StateDir: o.fakeStateDir}
	}
	alloc, err := allocate.New(aopts)
	if err != nil {
		return err
	}

	lib := gpu.NewLibrary(o.nvmlLibrary)
	popts := deviceplugin.Options{
		ResourceName:        eff.ResourceCountName,
		PluginDir:           o.pluginDir,
		SocketName:          o.socketName,
		KubeletSocket:       o.kubeletSocket,
		SplitCount:          eff.DeviceSplitCount,
		PreferredAllocation: eff.EnableGetPreferredAllocation,
		Devices:             &gpu.Discoverer{Lib: lib},
		Pods:                &pods.Client{Kube: kube, NodeName: o.nodeName},
		Allocator:           alloc,
		Delivery: delivery.Layers{
			Node: eff.NodeLimitDelivery, Global: eff.GlobalLimitDelivery, AllowPodOverride: eff.AllowPodLimitDeliveryOverride,
		},
		Recorder: recorder,
		Logger:   logger,
	}
	if o.healthChecks {
		popts.HealthLib = lib
	}
	logger.Info("Starting", "node", o.nodeName, "profile", profile, "operatingMode", eff.OperatingMode,
		"splitCount", eff.DeviceSplitCount, "hookPath", o.hookPath, "fakeDriver", o.fakeDriver)
	return deviceplugin.Run(ctx, popts)
}

func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}

// eventRecorder records events for pods (e.g. an ignored limit-delivery
// annotation); it stops with ctx.
func eventRecorder(ctx context.Context, kube kubernetes.Interface) delivery.EventRecorder {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "vgpu-device-plugin"})
}
