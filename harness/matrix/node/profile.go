package node

import (
	"fmt"

	"github.com/limitbed/limitbed/fakegpu/profile"
	"github.com/limitbed/limitbed/plugin/gpu/gpumock"
)

// ReadProfile reads the devices of a fakegpu profile (fakegpu/profiles/*.profile) as the plugin
// discovers them: one GPU per "device = N" block, with its MIG instances when in MIG mode.
// The format has one Go reader, fakegpu/profile, held to fakegpu's own.
func ReadProfile(path string) ([]gpumock.GPU, error) {
	p, err := profile.Load(path)
	if err != nil {
		return nil, fmt.Errorf("read fakegpu profile: %w", err)
	}
	gpus := make([]gpumock.GPU, 0, len(p.Devices))
	for _, d := range p.Devices {
		g := gpumock.GPU{Name: d.Name, UUID: d.UUID, MemoryMiB: d.MemoryMiB}
		for _, m := range d.MIG {
			g.MIG = append(g.MIG, m.UUID)
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}
