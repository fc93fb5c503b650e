// Package podrequest reads a container's GPU request the way HAMi's scheduler
// reads it (the resource names and defaults of the device configuration) and
// holds a placement to it. The scheduler's placement reaches the device
// plugin through pod annotations, which anyone who may update the pod can
// also write; the pod's resources are what the scheduler and the quota saw.
// A placement is accepted only when every device's limit is within the
// container's own request and the device the kubelet allocated: never looser
// (0 MiB is no limit at all), never larger than the GPU.
package podrequest

import (
	"errors"
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"

	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
)

// noPercent marks "no memory percentage requested", as HAMi's scheduler does.
const noPercent = 101

// Request is one container's GPU request after HAMi's defaults.
type Request struct {
	// Count is the number of devices (the count resource).
	Count int64
	// MemoryMiB is the memory per device in MiB (memoryFactor applied), or 0
	// when the request is a percentage of the device.
	MemoryMiB int64
	// MemoryPercent is the share of each device's memory, 1..100, when
	// MemoryMiB is 0.
	MemoryPercent int64
	// Cores is the share of each device's cores in percent; 0 or 100 and
	// more mean no core limit.
	Cores int64

	memFrom, coresFrom string // where each came from, for messages
}

// Read returns c's request under cfg. A container without the count resource
// is an error: the kubelet allocates devices only to containers that ask for
// it, so a placement for any other container is not the scheduler's.
func Read(c *corev1.Container, cfg v1.Requests) (Request, error) {
	var r Request
	count, ok, err := quantity(c, cfg.CountName)
	if err != nil {
		return r, err
	}
	if !ok || count < 1 {
		return r, fmt.Errorf("container %s requests no %s", c.Name, cfg.CountName)
	}
	r.Count = count
	mem, memOK, err := quantity(c, cfg.MemoryName)
	if err != nil {
		return r, err
	}
	pct, pctOK, err := quantity(c, cfg.MemoryPercentageName)
	if err != nil {
		return r, err
	}
	if pctOK && (pct < 0 || pct > 100) {
		return r, fmt.Errorf("container %s: %s: %d is not in 0..100", c.Name, cfg.MemoryPercentageName, pct)
	}
	factor := int64(max(cfg.MemoryFactor, 1))
	switch {
	case memOK && mem > 0:
		if mem > math.MaxInt32/factor {
			return r, fmt.Errorf("container %s: %s: %d x memoryFactor %d is more than %d MiB", c.Name, cfg.MemoryName, mem, factor, math.MaxInt32)
		}
		r.MemoryMiB = mem * factor
		r.memFrom = fmt.Sprintf("%s: %d (%d MiB)", cfg.MemoryName, mem, r.MemoryMiB)
	case pctOK:
		r.MemoryPercent = pct
		r.memFrom = fmt.Sprintf("%s: %d", cfg.MemoryPercentageName, pct)
	case cfg.DefaultMemory > 0:
		r.MemoryMiB = cfg.DefaultMemory
		r.memFrom = fmt.Sprintf("%d MiB (nvidia.defaultMemory: no memory request)", cfg.DefaultMemory)
	default:
		r.MemoryPercent = 100
		r.memFrom = "no memory request: the whole device"
	}
	cores, coresOK, err := quantity(c, cfg.CoreName)
	if err != nil {
		return r, err
	}
	if coresOK {
		if cores < 0 {
			return r, fmt.Errorf("container %s: %s: %d is negative", c.Name, cfg.CoreName, cores)
		}
		r.Cores = cores
		r.coresFrom = fmt.Sprintf("%s: %d", cfg.CoreName, cores)
	} else {
		r.Cores = int64(cfg.DefaultCores)
		r.coresFrom = fmt.Sprintf("%d %% (nvidia.defaultCores: no core request)", cfg.DefaultCores)
	}
	return r, nil
}

// quantity reads name from c's limits, else its requests (HAMi's order). A
// value that is not a whole number is an error, not a missing request.
func quantity(c *corev1.Container, name string) (int64, bool, error) {
	q, ok := c.Resources.Limits[corev1.ResourceName(name)]
	if !ok {
		q, ok = c.Resources.Requests[corev1.ResourceName(name)]
	}
	if !ok {
		return 0, false, nil
	}
	v, exact := q.AsInt64()
	if !exact {
		return 0, false, fmt.Errorf("container %s: %s: %s is not a whole number", c.Name, name, q.String())
	}
	return v, true, nil
}

// Capacity returns the memory (MiB, as the node registers it) of a GPU of
// this node, or false for a UUID the node does not have.
type Capacity func(uuid string) (int64, bool)

// Check holds devs, the placement for container c, to c's request and to the
// GPUs' capacity. The error names the device, what the placement gives and
// what the container asked for.
func Check(c *corev1.Container, devs annotations.ContainerDevices, cfg v1.Requests, capacity Capacity) error {
	r, err := Read(c, cfg)
	if err != nil {
		return err
	}
	return r.Check(c.Name, devs, cfg, capacity)
}

// Check holds devs, the placement for container name, to r.
func (r Request) Check(name string, devs annotations.ContainerDevices, cfg v1.Requests, capacity Capacity) error {
	if int64(len(devs)) != r.Count {
		return fmt.Errorf("container %s: the placement places %d devices, but the container requests %s: %d", name, len(devs), cfg.CountName, r.Count)
	}
	var errs []error
	for _, d := range devs {
		if err := r.checkDevice(d, capacity); err != nil {
			errs = append(errs, fmt.Errorf("container %s: %s: %w", name, d.UUID, err))
		}
	}
	return errors.Join(errs...)
}

func (r Request) checkDevice(d annotations.ContainerDevice, capacity Capacity) error {
	capMiB, ok := capacity(d.UUID)
	if !ok || capMiB < 1 {
		return errors.New("not a GPU of this node with a known memory size; refusing a limit that cannot be checked")
	}
	bound, want := r.MemoryMiB, r.memFrom
	if r.MemoryMiB == 0 {
		bound = capMiB * r.MemoryPercent / 100
		if r.MemoryPercent == 100 {
			want = fmt.Sprintf("100 %% of %s's %d MiB (%s)", d.UUID, capMiB, r.memFrom)
		} else {
			want = fmt.Sprintf("%d %% of %s's %d MiB (%d MiB; %s)", r.MemoryPercent, d.UUID, capMiB, bound, r.memFrom)
		}
	} else if bound > capMiB {
		return fmt.Errorf("the container requests %s, more than %s's %d MiB; refusing a limit past the device", r.memFrom, d.UUID, capMiB)
	}
	switch {
	case d.UsedMem == 0:
		return fmt.Errorf("the placement gives 0 MiB (no limit at all), but the container requests %s", want)
	case d.UsedMem < 0 || int64(d.UsedMem) > bound:
		return fmt.Errorf("the placement gives %d MiB, but the container requests %s", d.UsedMem, want)
	}
	return r.checkCores(d.UsedCores)
}

// checkCores: with a core limit asked for (1..99 %), the placement must give
// one at most as large, and not 0 (no limit); without one, any share up to
// the whole device (or the request, when it is larger) is no looser.
func (r Request) checkCores(used int32) error {
	limited := r.Cores > 0 && r.Cores < 100
	switch {
	case used < 0:
		return fmt.Errorf("the placement gives %d %% of the cores", used)
	case limited && used == 0:
		return fmt.Errorf("the placement gives 0 %% of the cores (no limit), but the container requests %s", r.coresFrom)
	case limited && int64(used) > r.Cores:
		return fmt.Errorf("the placement gives %d %% of the cores, but the container requests %s", used, r.coresFrom)
	case !limited && used > 100 && int64(used) > r.Cores:
		return fmt.Errorf("the placement gives %d %% of the cores, more than the device (%s)", used, r.coresFrom)
	}
	return nil
}
