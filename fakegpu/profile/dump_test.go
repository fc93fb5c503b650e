package profile

import (
	"fmt"
	"slices"
	"strings"
)

// dump prints a parsed profile (or its error) as testdata/dump.c prints fakegpu's: the two
// readers agree exactly when their dumps are equal.
func dump(path string, p *Profile, err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "== %s\n", path)
	if err != nil {
		fmt.Fprintf(&b, "error: %v\n", err)
		return b.String()
	}
	fmt.Fprintf(&b, "profile name=%s driver=%s cuda=%d nvml=%s context=%d launch=%d block=%d fail_alloc=%s nvml_error=%s lost_device=%s timeslice=%d boost=%d samples=%s sm_clock=%d\n",
		p.Name, p.DriverVersion, p.CUDAVersion, p.NVMLVersion, p.ContextMiB, p.LaunchNS, p.BlockNS, p.FailAlloc, p.NVMLError, p.LostDevice,
		p.TimesliceUS, p.PowerBoost, p.NVMLSamples, p.SMClockMHz)
	for d, v := range p.Devices {
		mig := 0
		if v.MIGMode {
			mig = 1
		}
		fmt.Fprintf(&b, "device %d name=%s uuid=%s memory=%d pci=%s pci_id=%d minor=%d arch=%d cc=%d.%d sm=%d mig=%d bar1=%d\n",
			d, v.Name, v.UUID, v.MemoryMiB, v.PCIBusID, v.PCIDeviceID, v.Minor, nvmlArch(v.Architecture), v.CCMajor, v.CCMinor, v.SMCount, mig, v.BAR1MiB)
		for m, g := range v.MIG {
			fmt.Fprintf(&b, "mig %d.%d profile=%s uuid=%s memory=%d gi=%d ci=%d sm=%d ce=%d dec=%d enc=%d jpg=%d ofa=%d slices=%d\n",
				d, m, g.Profile, g.UUID, g.MemoryMiB, g.GPUInstanceID, g.ComputeInstanceID, g.SMCount, g.CopyEngines, g.Decoders, g.Encoders, g.JPEGs, g.OFAs, g.Slices)
		}
	}
	return b.String()
}

// nvmlArch is NVML's number for an architecture name (abi/include/limitbed/nvml_abi.h:
// NVML_DEVICE_ARCH_KEPLER 2 … HOPPER 9), which fakegpu stores.
func nvmlArch(name string) int { return slices.Index(archs, name) + 2 }
