package allocate

import (
	"fmt"
	"strconv"

	"github.com/limitbed/limitbed/plugin/libvars"
	"github.com/limitbed/limitbed/plugin/paths"
)

// libraryEnv returns the library's variables for the container's devices
// (plugin/libvars names them): memory per device index, the first device's
// core limit, the shared cache path and the optional switches.
func (a *Allocator) libraryEnv(req Request) map[string]string {
	env := map[string]string{}
	for i, d := range req.Devices {
		env[libvars.MemoryLimitOf(i)] = fmt.Sprintf("%dm", d.UsedMem)
	}
	// Upstream never sets per-device core limits: device 0 speaks for all.
	env[libvars.SMLimit] = strconv.Itoa(int(req.Devices[0].UsedCores))
	env[libvars.SharedCache] = a.sharedCachePath()
	if a.opts.Oversubscribe {
		env[libvars.Oversubscribe] = "true"
	}
	if a.opts.LibCudaLogLevel != "" {
		env[libvars.LogLevel] = a.opts.LibCudaLogLevel
	}
	if a.opts.DisableCoreLimit {
		env[libvars.CorePolicy] = "disable"
	}
	if a.opts.HostPIDBroker && a.opts.Profile != ProfileHAMiV210 {
		env[libvars.HostPIDBroker] = "1"
	}
	return env
}

func (a *Allocator) sharedCachePath() string {
	if a.opts.Profile == ProfileHAMiV210 {
		// HAMi v2.10 named the region after a fresh UUID on every Allocate.
		return paths.ContainerVGPUDir + "/" + a.newUUID() + ".cache"
	}
	return paths.ContainerUsageCache
}
