package main

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/allocate"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/delivery"
	"github.com/limitbed/limitbed/plugin/deviceplugin"
	"github.com/limitbed/limitbed/plugin/gpu"
	kubeclient "github.com/limitbed/limitbed/plugin/internal/kube"
	"github.com/limitbed/limitbed/plugin/pods"
)

// serve builds the plugin from o and runs it until ctx ends.
func serve(ctx context.Context, o options) error {
	logger := klog.FromContext(ctx)
	profile, err := allocate.ParseProfile(o.compatProfile)
	if err != nil {
		return fmt.Errorf("--compat-profile: %w", err)
	}
	eff, err := v1.LoadEffective(o.deviceConfigFile, o.nodeConfigFile, o.nodeName, logger)
	if err != nil {
		return err
	}

	kube, err := kubeclient.Client(o.kubeconfig, o.apiTimeout)
	if err != nil {
		return err
	}
	recorder := kubeclient.EventRecorder(ctx, kube, "vgpu-device-plugin")

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
		if o.fakeStateDir != "" {
			if err := allocate.ShareFakeState(o.fakeStateDir); err != nil {
				logger.Error(err, "Login sessions' GPU processes may not share the pods' fake GPU")
			}
		}
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
		APITimeout:          o.apiTimeout,
		Requests:            eff.Requests,
		MemoryScaling:       eff.DeviceMemoryScaling,
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
