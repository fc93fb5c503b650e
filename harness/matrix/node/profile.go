package node

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/limitbed/limitbed/plugin/gpu/gpumock"
)

// ReadProfile reads the devices of a fakegpu profile (fakegpu/profiles/*.profile) as the plugin
// discovers them: one GPU per "device = N" block, its MIG instances when "mig_mode = enabled".
// Only the keys discovery needs are read; fakegpu itself remains the authority on the format.
func ReadProfile(path string) ([]gpumock.GPU, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read fakegpu profile: %w", err)
	}
	defer f.Close()
	var gpus []gpumock.GPU
	var migEnabled []bool
	cur := func() *gpumock.GPU {
		if len(gpus) == 0 {
			return nil
		}
		return &gpus[len(gpus)-1]
	}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if key == "device" {
			gpus = append(gpus, gpumock.GPU{})
			migEnabled = append(migEnabled, false)
			continue
		}
		g := cur()
		if g == nil {
			continue // global keys
		}
		switch key {
		case "name":
			g.Name = val
		case "uuid":
			g.UUID = val
		case "memory_mib":
			mib, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: memory_mib %q: %w", path, n, val, err)
			}
			g.MemoryMiB = mib
		case "mig_mode":
			migEnabled[len(migEnabled)-1] = val == "enabled"
		case "mig_uuid":
			g.MIG = append(g.MIG, val)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read fakegpu profile %s: %w", path, err)
	}
	for i := range gpus {
		if gpus[i].UUID == "" {
			return nil, fmt.Errorf("fakegpu profile %s: device %d has no uuid", path, i)
		}
		if !migEnabled[i] {
			gpus[i].MIG = nil
		}
	}
	if len(gpus) == 0 {
		return nil, fmt.Errorf("fakegpu profile %s: no device", path)
	}
	return gpus, nil
}
